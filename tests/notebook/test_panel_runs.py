"""The panel's runs: the baseline of each fit is its first baseline run that measured."""

from __future__ import annotations

from dataclasses import replace

from speedlab.notebook.panel_runs import PanelRun, baseline_of, judged, results_table
from tests.records import run_of


def _run(fit: int, step_s: float, knobs: dict | None = None, error: str | None = None):
    return replace(run_of([0.0] * 61, [step_s] * 61, knobs=knobs), fit=fit, error=error)


def test_each_fit_is_judged_against_its_own_baseline_and_a_failed_one_is_none() -> None:
    failed = PanelRun(_run(1, 0.010, error="ValueError: bug"), baseline=True, stopped=False)
    runs = [
        failed,
        PanelRun(_run(1, 0.010), baseline=True, stopped=False),
        PanelRun(_run(2, 0.040), baseline=True, stopped=False),
    ]
    assert baseline_of(runs, 1) is runs[1].result and baseline_of(runs, 2) is runs[2].result
    later = [
        judged(runs, _run(fit, step_s, {"workers": 2})) for fit, step_s in ((1, 0.005), (2, 0.02))
    ]
    assert [round(run.speedup, 2) for run in later] == [2.0, 2.0]
    rows = results_table(
        [*runs, *(PanelRun(run, baseline=False, stopped=False) for run in later)]
    ).rows
    assert [row[1] for row in rows] == [
        "baseline fit=1",
        "baseline fit=1 (repeat)",
        "baseline fit=2",
        "workers=2 fit=1",
        "workers=2 fit=2",
    ]
