"""speedlab.analysis.doctor: ``diagnose`` reads a run's figures only once it has enough steady
steps (each family of rules is tested in the test module of its own module)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from speedlab.analysis.doctor import diagnose
from speedlab.measure.machine import usable_cores
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import known_cost, profile, the
from tests.records import run_of


def test_a_run_too_short_for_a_steady_state_gets_no_figure_findings() -> None:
    run = profile(known_cost(n=2000), steps=4).baseline
    assert diagnose(run) == []


def _uneven(data: float, batch: float, *, workers: int = 0, pause: bool = True) -> RunResult:
    """A run of 60 steps whose loader waits ``data`` on average, in bursts with workers, with a
    pause (20 rounds long, 150 ms at least) among its steady steps: the averages and the
    medians differ."""
    period = max(1, workers)
    waits = [data * period if i % period == 0 else 0.0 for i in range(60)]
    batches = [batch * (0.8 if i % 2 else 1.2) for i in range(60)]
    if pause:
        batches[30] += max(0.150, 20 * period * (data + batch))
    return run_of(waits, batches, knobs={"workers": workers})


FIGURE_RUNS = {
    "cpu_bound in bursts": _uneven(0.03, 0.01, workers=3),
    "oversubscribed": _uneven(0.03, 0.01, workers=3),
    "cpu_bound": _uneven(0.03, 0.01),
    "io_bound": replace(  # the training thread idle through the wait: storage, not the CPU
        _uneven(0.03, 0.01),
        system={
            "cores": usable_cores(),
            "cpu_percent": 15.0,
            "main_cpu_percent": 25.0,
            "workers_cpu_percent": 0.0,
            "train_thread_cpu_percent": 25.0,
            "torch_threads": 1,
        },
    ),
    "overhead_bound": _uneven(0.0005, 0.002),
    "model_bound": _uneven(0.0001, 0.02),
}


@pytest.mark.parametrize("kind", FIGURE_RUNS)
def test_every_figure_a_finding_states_is_the_tables_for_its_run(kind: str) -> None:
    """A finding's times and shares are the run's table figures (to the finding's precision),
    never another statistic of the same steps."""
    run = FIGURE_RUNS[kind]
    assert run.steady.pauses  # the pause is left out of the table and the findings alike
    found = the(diagnose(run), kind.split()[0])
    [row] = SweepResult([run]).table().rows
    shown = dict(zip(SweepResult([run]).table().columns, row))
    times = {
        round(x * 1e3, 1)
        for x in (run.data_time, run.batch_time, run.step_time, run.steady.typical_data)
    }
    stated = [float(ms) for ms in re.findall(r"(\d+\.\d) ms", found.evidence)]
    assert stated and set(stated) <= times, (stated, times, found.evidence)
    for share in re.findall(r"(\d+%) of the step", found.evidence):
        assert share == shown["data share"]
    assert float(shown["data_time ms"]) == pytest.approx(run.data_time * 1e3, abs=0.005)
    assert float(shown["batch_time ms"]) == pytest.approx(run.batch_time * 1e3, abs=0.005)
