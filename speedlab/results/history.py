"""Reading the run history without writing to it (``history``, ``stored_sweep``), and showing
it as the table ``%speedlab history`` and ``speedlab history`` print."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speedlab.results.store import NotStored, RunStore, default_store_path, limit_of
from speedlab.results.table import Table, fmt


def history(n: int | None = None, path: str | Path | None = None) -> list[dict[str, Any]]:
    """The last `n` stored runs (all if None), newest first; [] when there is no store yet.

    Reading never creates a store file.
    """
    limit_of(n)  # a bad n is refused with or without a store
    path = Path(path).expanduser() if path is not None else default_store_path()
    if not path.exists():
        return []
    with RunStore(path, read_only=True) as store:
        return store.history(n)


def stored_sweep(sweep_id: int, path: str | Path | None = None) -> dict[str, Any]:
    """Sweep ``sweep_id`` as ``RunStore.sweep`` gives it, with the store's ``path`` and
    ``run_dicts``: its stored runs in order when it has no ``result`` (it never finished), else
    [].

    Raises ``NotStored`` for an id the store does not hold and for a sweep that left nothing to
    show (it never finished and no run of it ended). Reading never creates a store file.
    """
    path = Path(path).expanduser() if path is not None else default_store_path()
    if not path.exists():
        raise NotStored(f"no sweep {sweep_id}: there is no run store at {path} yet")
    with RunStore(path, read_only=True) as store:
        entry = store.sweep(sweep_id) | {"path": str(path)}
        entry["run_dicts"] = store.sweep_runs(sweep_id) if entry["result"] is None else []
    if entry["result"] is None and not entry["run_dicts"]:
        raise NotStored(
            f"sweep {sweep_id} in the run store {path} has nothing to show: it ended before "
            "its first run did"
        )
    return entry


def history_table(rows: list[dict[str, Any]]) -> Table:
    """`RunStore.history()` rows as a Table (aligned text, HTML in a notebook, CSV). The sweep
    column is the id that ``speedlab.load`` (``%speedlab load``, ``speedlab load``) takes."""
    columns = [
        "run",
        "sweep",
        "when",
        "samples/s",
        "speedup",
        "data_time ms",
        "batch_time ms",
        "data share",
        "final loss",
        "name",
        "knobs",
        "error",
    ]
    return Table(
        columns,
        [
            [
                str(row["run_id"]),
                str(row["sweep_id"]),
                (row["created"] or "")[:16].replace("T", " "),
                fmt(row["samples_per_s"], ".1f"),
                fmt(row["speedup"], ".2f", suffix="x"),
                fmt(row["data_time"], ".2f", scale=1e3),
                fmt(row["batch_time"], ".2f", scale=1e3),
                fmt(row["data_share"], ".0%"),
                fmt(row["final_loss"], ".4g"),
                row["sweep"] or "",
                " ".join(f"{k}={v}" for k, v in row["knobs"].items()) or "as written",
                _first_line(row["error"]),
            ]
            for row in rows
        ],
    )


def format_history(rows: list[dict[str, Any]]) -> str:
    """An aligned text table of `RunStore.history()` rows, for `%speedlab history`."""
    return str(history_table(rows)) if rows else "No runs stored yet."


def _first_line(error: str | None, width: int = 60) -> str:
    line = next(iter((error or "").strip().splitlines()), "")
    return line if len(line) <= width else line[: width - 1] + "…"
