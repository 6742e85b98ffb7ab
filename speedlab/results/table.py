"""A small table that prints aligned in a terminal, renders as HTML in a notebook and writes CSV."""

from __future__ import annotations

import csv
import html
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Table:
    """Rows of already formatted cells under named columns.

    Args:
        columns: the column names, left to right.
        rows: the cells of each row, as text.
        caption: a line above the table (default none).
        descriptions: what each column shows, by column name, in one short line: the hover text
            of its heading in HTML and a line of ``legend()`` (default none).

    Example::

        table = Table(["run", "samples/s"], [["baseline", "25.0"]],
                      descriptions={"samples/s": "samples trained per second"})
        print(table.legend())  # samples/s  samples trained per second
    """

    columns: list[str]
    rows: list[list[str]]
    caption: str = ""
    descriptions: dict[str, str] = field(default_factory=dict)

    def legend(self) -> str:
        """One line per described column, in the table's order: its name, then what it shows."""
        described = [(c, self.descriptions[c]) for c in self.columns if c in self.descriptions]
        width = max((len(c) for c, _ in described), default=0)
        return "\n".join(f"{c:<{width}}  {text}" for c, text in described)

    def __str__(self) -> str:
        cells = [self.columns, *self.rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.columns))]
        lines = [
            "  ".join(
                cell.ljust(w) if i == 0 else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(row, widths))
            )
            for row in cells
        ]
        lines.insert(1, "  ".join("-" * w for w in widths))
        if self.caption:
            lines.insert(0, self.caption)
        return "\n".join(line.rstrip() for line in lines)

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        """The table with its own spacing and alignment inline: front ends style tables
        differently (nbclassic sets no cell padding), and a results table must stay readable."""
        head = "".join(
            f'<th style="{_cell(i)}"{self._title(c)}>{html.escape(c)}</th>'
            for i, c in enumerate(self.columns)
        )
        body = "".join(
            "<tr>"
            + "".join(f'<td style="{_cell(i)}">{html.escape(c)}</td>' for i, c in enumerate(row))
            + "</tr>"
            for row in self.rows
        )
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return (
            f'<table class="speedlab-table">{caption}<thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>"
        )

    def _title(self, column: str) -> str:
        """The heading's hover text, as an HTML attribute; empty where it has no description."""
        text = self.descriptions.get(column)
        return f' title="{html.escape(text)}"' if text else ""

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(self.columns)
            writer.writerows(self.rows)
        return path


def _cell(column: int) -> str:
    """A cell's inline style: spaced, the first column (the run) left, the figures right."""
    return f"padding:2px 10px;text-align:{'left' if column == 0 else 'right'}"


def fmt(value: float | None, spec: str, *, scale: float = 1.0, suffix: str = "") -> str:
    """Format a number, or a dash when it is missing or NaN."""
    if value is None or value != value:
        return "-"
    return f"{value * scale:{spec}}{suffix}"


def fmt_ms(seconds: float | None) -> str:
    """Seconds as milliseconds to one decimal (``0.01234`` -> ``'12.3 ms'``), a dash if missing."""
    return fmt(seconds, ".1f", scale=1e3, suffix=" ms")
