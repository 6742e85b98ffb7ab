"""speedlab.analysis.doctor: ``diagnose`` reads a run's figures only once it has enough steady
steps (each family of rules is tested in the test module of its own module)."""

from __future__ import annotations

from speedlab.analysis.doctor import diagnose
from tests.doctor_runs import known_cost, profile


def test_a_run_too_short_for_a_steady_state_gets_no_figure_findings() -> None:
    run = profile(known_cost(n=2000), steps=4).baseline
    assert diagnose(run) == []
