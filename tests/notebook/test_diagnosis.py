"""How a sweep shows its findings: about what it changed in full, the others one line each."""

from __future__ import annotations

from IPython.lib.pretty import pretty

from speedlab.notebook.diagnosis import FOLDED, KIND_PARTS, about_the_sweep, findings_html
from speedlab.results.findings import KINDS, Finding
from speedlab.results.sweep import SweepResult
from tests.records import run_of

LOADING = Finding(
    "cpu_bound",
    "Each step waits 9.0 ms for data.",
    "Preload it.",
    "preload",
    "critical",
    "ram",
    "Building batches on the CPU takes 90% of each step",
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
    assert (
        f"[critical] cpu_bound ({FOLDED}; in full: .diagnosis): Building batches on the CPU "
        "takes 90% of each step; try --preload ram." in text
    )
    page = findings_html(sweep)
    assert '<details><summary style="display:list-item;cursor:pointer">[critical] cpu_bound' in page
    assert "</summary>Each step waits 9.0 ms for data. Preload it." in page  # behind the fold


def test_a_workers_sweep_shows_the_data_pipelines_findings_in_full() -> None:
    sweep = sweep_over("workers", (0, 2))
    about, folded = about_the_sweep(sweep)
    assert about == [VERDICT, LOADING] and folded == [COMPUTE]
    assert str(LOADING) in pretty(sweep)


def test_a_single_run_shows_every_findings_headline_with_the_rest_folded() -> None:
    sweep = sweep_over("precision", ("32-true",))
    assert about_the_sweep(sweep) == ([VERDICT, COMPUTE, LOADING], [])
    page = findings_html(sweep)
    assert FOLDED not in page
    assert page.count("<details>") == 3  # each headline shown, its evidence folded under it


def test_a_finding_with_no_knob_to_try_is_folded_by_its_kind() -> None:
    """A loader reading tensors already in memory: the doctor names no knob, yet the finding is
    about the data pipeline, not about a precision sweep's question."""
    in_memory = Finding("cpu_bound", "Each step waits 9.0 ms for data.", "Measure again.")
    sweep = sweep_over("precision", ("32-true", "bf16-mixed"))
    sweep = SweepResult(sweep.runs, diagnosis=[VERDICT, in_memory])
    assert about_the_sweep(sweep) == ([VERDICT], [in_memory])
    assert f"[warn] cpu_bound ({FOLDED}; in full: .diagnosis): Each step waits" in pretty(sweep)


def test_every_kind_is_placed_in_a_part_or_shown_with_every_sweep() -> None:
    assert set(KIND_PARTS) | {"verdict", "straggler", "validation_heavy"} == set(KINDS)
