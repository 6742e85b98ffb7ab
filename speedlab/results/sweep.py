"""The runs of one sweep, compared with the first: the best run, exports, the stored form.

A sweep shows itself by handing over to the views: its table (speedlab.notebook.tables, which
formats each run's stored comparison with the baseline) and its chart (speedlab.notebook.plots).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedlab.results.codec import coerce
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.table import Table

FORMAT = 3
"""The version of ``SweepResult.to_dict()``'s layout (1: before runs kept their judgement;
2: judged on medians, before one rule read every figure: speedlab.results.steady)."""
MEDIANS_FORMAT = 2
"""The layout of sweeps judged on medians: their runs are judged again when loaded."""


@dataclass(frozen=True)
class SweepResult:
    """The runs of one ``%%profile_train`` cell or ``profile_train`` call; the first is the
    baseline. Assembled and judged once (speedlab.analysis.verdict.judge_sweep): each run keeps
    its comparison with the baseline, the sweep its findings, and every view formats those."""

    runs: list[RunResult]
    name: str | None = None
    diagnosis: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    chosen: RunResult | None = None
    """The run a search settled on (autotune's best), which ``best`` returns when set."""

    def __post_init__(self) -> None:
        coerce(self)

    @property
    def baseline(self) -> RunResult:
        return self.runs[0]

    def baseline_of(self, run: RunResult) -> RunResult:
        """What ``run`` is judged against: the first run of the same fit (a cell that fits
        twice, a fit then a fine-tune, has a baseline for each), the sweep's baseline in a cell
        that fits once."""
        return next((r for r in self.runs if r.fit == run.fit), self.baseline)

    @property
    def best(self) -> RunResult | None:
        """The fastest run that finished without error (once judged, the highest speedup over
        its own fit's baseline: the fastest, in a cell that fits once), or the run a search
        chose: autotune keeps only changes that help beyond noise, so a run that merely
        measured faster once is not its best."""
        if self.chosen is not None:
            return self.chosen
        done = [r for r in self.runs if r.ok and math.isfinite(r.samples_per_s)]
        if done and all(r.speedup is not None for r in done):  # judged: each over its own fit's
            return max(done, key=lambda r: r.speedup)
        return max(done, key=lambda r: r.samples_per_s, default=None)

    def table(self) -> Table:
        """One row per run: throughput, its speedup over the baseline and whether that is
        beyond noise, the step times, the system figures and the notes."""
        from speedlab.notebook.tables import sweep_table

        return sweep_table(self)

    def plot(self) -> Any:
        """Per run a stacked bar of data_time and batch_time, and samples/s (a matplotlib Figure)."""
        from speedlab.notebook.plots import sweep_figure

        return sweep_figure(self)

    def to_dict(self, *, records: bool = True) -> dict[str, Any]:
        """The whole sweep as plain data: ``from_dict`` gives it back as it was."""
        index = {id(run): i for i, run in enumerate(self.runs)}
        best = self.best
        return {
            "format": FORMAT,
            "name": self.name,
            "runs": [r.to_dict(records=records) for r in self.runs],
            "best": index.get(id(best)) if best is not None else None,
            "chosen": index.get(id(self.chosen)) if self.chosen is not None else None,
            "diagnosis": [f.to_dict() for f in self.diagnosis],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepResult:
        """A sweep from ``to_dict()`` output; one line naming the format where it is not one
        this speedlab reads."""
        version = data.get("format")
        if version != FORMAT:
            raise ValueError(
                f"A stored sweep of format {version!r}: this speedlab reads format {FORMAT} "
                "(another speedlab version wrote it)."
            )
        runs = [RunResult.from_dict(r) for r in data["runs"]]
        chosen = data.get("chosen")
        return cls(
            runs,
            name=data.get("name"),
            diagnosis=[Finding.from_dict(f) for f in data.get("diagnosis", [])],
            notes=list(data.get("notes", [])),
            chosen=runs[chosen] if chosen is not None else None,
        )

    def to_json(self, *, records: bool = True, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(records=records), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> SweepResult:
        return cls.from_dict(json.loads(text))

    def to_csv(self, path: str | Path) -> Path:
        return self.table().to_csv(path)

    def __str__(self) -> str:
        return "\n".join([str(self.table()), *self.notes])

    def _repr_pretty_(self, p, cycle: bool) -> None:
        """The table, the notes and the findings: those about what the sweep changed in full,
        the others one line each (speedlab.notebook.diagnosis)."""
        from speedlab.notebook.diagnosis import findings_text

        p.text(str(self))
        for line in findings_text(self):
            p.break_()
            p.text(line)

    def _repr_html_(self) -> str:
        from speedlab.notebook.diagnosis import findings_html

        return self.table()._repr_html_() + findings_html(self)
