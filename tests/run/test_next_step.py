"""speedlab.run.next_step: the ``%%profile_train`` line to run next, from the doctor's top
finding on a sweep's best run."""

from __future__ import annotations

import pytest

from speedlab.results.knobs import KNOBS, option_text
from speedlab.results.sweep import SweepResult
from speedlab.run.next_step import next_experiment
from tests.doctor_runs import require_quiet


def test_next_experiment_keeps_the_best_knobs_and_sweeps_the_top_finding(
    throttled_sweep: SweepResult,
) -> None:
    require_quiet(*throttled_sweep.runs)
    line = next_experiment(throttled_sweep)
    assert line.startswith("%%profile_train --workers 2 --preload off,ram --steps 15")


def test_an_overhead_bound_run_sweeps_a_larger_batch_next(tabular_sweep: SweepResult) -> None:
    require_quiet(tabular_sweep.baseline)
    assert "--batch-size 64,256 --steps 40" in next_experiment(tabular_sweep)


@pytest.mark.parametrize("knob", list(KNOBS))
def test_a_findings_knob_is_written_as_the_option_the_magic_reads(knob: str) -> None:
    assert option_text(knob, 1).startswith(f"--{KNOBS[knob].option} ")
