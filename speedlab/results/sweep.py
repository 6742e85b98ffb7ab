"""The runs of one sweep, compared with the first: speedups, the best run, exports.

A sweep shows itself by handing over to the views: its table (speedlab.notebook.tables, where
each speedup is judged against the noise) and its chart (speedlab.notebook.plots).
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedlab.results.run import RunResult
from speedlab.results.table import Table


@dataclass
class SweepResult:
    """The runs of one ``%%profile_train`` cell or ``profile_train`` call; the first is the baseline."""

    runs: list[RunResult]
    name: str | None = None
    diagnosis: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chosen: RunResult | None = None
    """The run a search settled on (autotune's best), which ``best`` returns when set."""

    def __post_init__(self) -> None:
        self.update_speedups()

    def update_speedups(self) -> None:
        """Set each run's speedup: its samples/s over the baseline's."""
        base = self.baseline.samples_per_s if self.runs else math.nan
        for run in self.runs:
            ok = math.isfinite(run.samples_per_s) and math.isfinite(base) and base > 0
            run.speedup = run.samples_per_s / base if ok else None

    @property
    def baseline(self) -> RunResult:
        return self.runs[0]

    @property
    def best(self) -> RunResult | None:
        """The fastest run that finished without error, or the run a search chose: autotune
        keeps only changes that help beyond noise, so a run that merely measured faster once
        is not its best."""
        if self.chosen is not None:
            return self.chosen
        done = [r for r in self.runs if r.ok and math.isfinite(r.samples_per_s)]
        return max(done, key=lambda r: r.samples_per_s, default=None)

    def table(self) -> Table:
        """One row per run: throughput, its speedup over the baseline and whether that is
        beyond noise, the medians, the system figures and the notes."""
        from speedlab.notebook.tables import sweep_table

        return sweep_table(self)

    def plot(self) -> Any:
        """Per run a stacked bar of data_time and batch_time, and samples/s (a matplotlib Figure)."""
        from speedlab.notebook.plots import sweep_figure

        return sweep_figure(self)

    def to_dict(self, *, records: bool = True) -> dict[str, Any]:
        return {
            "name": self.name,
            "runs": [r.to_dict(records=records) for r in self.runs],
            "best": next((i for i, r in enumerate(self.runs) if r is self.best), None),
            "diagnosis": [f.to_dict() if hasattr(f, "to_dict") else f for f in self.diagnosis],
            "notes": self.notes,
        }

    def to_json(self, *, records: bool = True, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(records=records), indent=indent)

    def to_csv(self, path: str | Path) -> Path:
        return self.table().to_csv(path)

    def __str__(self) -> str:
        return "\n".join([str(self.table()), *self.notes])

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(str(self))
        for finding in self.diagnosis:
            p.break_()
            p.text(str(finding))

    def _repr_html_(self) -> str:
        findings = "".join(f"<li>{html.escape(str(f))}</li>" for f in self.diagnosis)
        return self.table()._repr_html_() + (f"<ul>{findings}</ul>" if findings else "")
