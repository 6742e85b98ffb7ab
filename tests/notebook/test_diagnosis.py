"""How a sweep shows its findings: about what it changed in full, the others one line each."""

from __future__ import annotations

from IPython.lib.pretty import pretty

from speedlab.notebook.diagnosis import FOLDED, about_the_sweep, findings_html
from speedlab.results.findings import Finding
from speedlab.results.sweep import SweepResult
from tests.records import run_of

LOADING = Finding(
    "cpu_bound", "Each step waits 9.0 ms for data.", "Preload it.", "preload", "critical", "ram"
)
COMPUTE = Finding(
    "model_bound",
    "Data is 1% of the step.",
    "Speed up the compute.",
    "precision",
    "warn",
    "bf16-mixed",
)
VERDICT = Finding("verdict", "No run beat the baseline beyond noise.", "Keep it.", severity="info")


def sweep_over(knob: str, values: tuple) -> SweepResult:
    runs = [run_of([0.0] * 10, [0.01] * 10, knobs={knob: v}) for v in values]
    return SweepResult(runs, diagnosis=[VERDICT, COMPUTE, LOADING])


def test_a_precision_sweep_folds_the_data_pipelines_findings_to_one_line() -> None:
    sweep = sweep_over("precision", ("32-true", "bf16-mixed"))
    assert about_the_sweep(sweep) == ([VERDICT, COMPUTE], [LOADING])
    text = pretty(sweep)
    assert str(COMPUTE) in text and str(VERDICT) in text
    assert str(LOADING) not in text
    assert f"[critical] cpu_bound ({FOLDED}; in full: .diagnosis). Try --preload ram." in text
    page = findings_html(sweep)
    assert "<details><summary>[critical] cpu_bound" in page
    assert "Each step waits 9.0 ms for data." in page  # in full, behind the disclosure


def test_a_workers_sweep_shows_the_data_pipelines_findings_in_full() -> None:
    sweep = sweep_over("workers", (0, 2))
    about, folded = about_the_sweep(sweep)
    assert about == [VERDICT, LOADING] and folded == [COMPUTE]
    assert str(LOADING) in pretty(sweep)


def test_a_single_run_shows_every_finding_in_full() -> None:
    sweep = sweep_over("precision", ("32-true",))
    assert about_the_sweep(sweep) == ([VERDICT, COMPUTE, LOADING], [])
    assert "<details>" not in findings_html(sweep)
