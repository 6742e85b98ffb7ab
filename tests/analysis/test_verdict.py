"""speedlab.analysis.verdict: the sweep's verdict, the best run and what helped."""

from __future__ import annotations

from speedlab.analysis.verdict import diagnose_sweep
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import the


def test_the_verdict_names_the_best_run_and_what_helped(batch_sweep: SweepResult) -> None:
    verdict = the(diagnose_sweep(batch_sweep), "verdict")
    assert verdict.evidence.startswith("Best: batch_size=16 at ")
    assert "faster" in verdict.evidence and "Helped: batch_size=16" in verdict.evidence
    assert verdict.advice == "Keep batch_size=16."
