"""The panel's runs: which is the baseline, each judged against it as it ends, and the table
of them with how to read its noise.

The baseline is the first run made as one (the first Run, or ``repeat baseline``) that
measured: a first run that failed or was stopped before its first step has nothing to be
compared with, and the next run takes its place.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from speedlab.analysis.compare import compare
from speedlab.analysis.predict import guess_text, predicted_text
from speedlab.notebook.tables import verdict_text
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.results.table import Table, fmt


@dataclass
class PanelRun:
    """One row of the panel's table: a result and how it came about."""

    result: RunResult
    baseline: bool
    stopped: bool

    @property
    def measured(self) -> bool:
        """Whether it trained steps without an error: it can be compared."""
        return self.result.ok and self.result.steps > 0


def baseline_of(runs: list[PanelRun], fit: int | None = None) -> RunResult | None:
    """The panel's baseline: the first baseline run that measured (of ``fit``, in a cell that
    fits more than once); None before one has."""
    rows = (row for row in runs if row.baseline and row.measured and row.result.fit == fit)
    return next((row.result for row in rows), None)


def judged(runs: list[PanelRun], result: RunResult) -> RunResult:
    """``result`` with its comparison with the panel's baseline of its fit (``result`` itself
    where there is none yet), judged once as it ends, as a sweep judges its runs."""
    base = baseline_of(runs, result.fit) or result
    return replace(result, comparison=compare(base, result))


def panel_sweep(runs: list[PanelRun], name: str | None) -> SweepResult | None:
    """The panel's runs as a sweep (``speedlab.last``), its baseline first, the rest in the
    order they ran; None before a run."""
    if not runs:
        return None
    base = baseline_of(runs, runs[0].result.fit)
    ordered = [base] if base is not None else []
    return SweepResult(ordered + [row.result for row in runs if row.result is not base], name=name)


def results_table(runs: list[PanelRun]) -> Table | None:
    """One row per run: its speedup over the baseline, the verdict as the magic's table gives
    it, and its noise; None before a run."""
    if not runs:
        return None
    rows: list[list[str]] = []
    repeats: dict[int | None, int] = {}  # baseline runs of each fit so far
    for i, row in enumerate(runs, 1):
        r = row.result
        first = baseline_of(runs, r.fit) or runs[0].result
        spread = r.throughput_summary
        noise = spread.iqr / 2 / spread.median if spread.median > 0 else math.nan
        status = f"error: {r.error}" if r.error else "stopped" if row.stopped else "ok"
        if row.baseline and r.knobs == first.knobs:
            repeats[r.fit] = repeats.get(r.fit, 0) + 1
        label = r.label(first) + (" (repeat)" if repeats.get(r.fit, 0) > 1 and row.baseline else "")
        rows.append(
            [
                str(i),
                label,
                fmt(r.samples_per_s, ",.1f"),
                fmt(r.speedup, ".2f", suffix="x"),
                verdict_text(r, first),
                predicted_text(r) or "-",
                guess_text(r) or "-",
                f"±{noise:.1%}" if math.isfinite(noise) else "-",
                fmt(r.data_time, ".2f", scale=1e3),
                fmt(r.batch_time, ".2f", scale=1e3),
                fmt(r.data_share, ".0%"),
                str(r.steps),
                status,
            ]
        )
    columns = ["#", "run", "samples/s", "speedup", "vs baseline", "predicted", "your guess"]
    columns += ["noise", "data_time ms", "batch_time ms", "data share", "steps", "status"]
    return Table(columns, rows)


def noise_html(runs: list[PanelRun]) -> str:
    """How to read the table's noise: the spread of the baseline's whole runs where it ran
    twice or more."""
    rates = [row.result.samples_per_s for row in runs if row.baseline and row.measured]
    rates = [x for x in rates if math.isfinite(x)]
    if len(rates) < 2:
        return (
            "<small>noise: half the spread (IQR) of the steps' samples/s. Press "
            "<i>repeat baseline</i> to see how much whole runs vary.</small>"
        )
    middle = statistics.median(rates)
    spread = (max(rates) - min(rates)) / 2 / middle
    return (
        f"<small>The baseline ran {len(rates)} times: {min(rates):,.1f} to {max(rates):,.1f} "
        f"samples/s (±{spread:.1%}). Speedups within that are noise.</small>"
    )
