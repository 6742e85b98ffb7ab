"""The device timeline's figures and the doctor's findings recomputed from recorded runs
(tests/fixtures/gpu/, written by ``make gpu-check``): each workload's step records, the truth
synchronised beside them and the limit it was built to have. Each says in its metadata where it
was recorded: a lent GPU (naming it, its torch and its driver) or the simulated device. All
five are an H200's (benchmarks/gpu-runs/2026-11-30-h200-2/, the third run there)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.gpu_check import LIMIT_KINDS
from speedlab.analysis.doctor import diagnose
from speedlab.analysis.launches import LAUNCH_IDLE_SHARE
from speedlab.results.codec import from_plain
from speedlab.results.knobs import Knobs
from speedlab.results.run import RunResult
from speedlab.results.system import SystemSummary

FIXTURES = sorted((Path(__file__).parents[1] / "fixtures" / "gpu").glob("*.json"))


def recorded(path: Path) -> tuple[dict[str, Any], RunResult]:
    fixture = json.loads(path.read_text())
    run = fixture["run"]
    result = RunResult(
        knobs=from_plain(Knobs, run["knobs"]),
        records=run["records"],
        system=from_plain(SystemSummary, run["system"]),
        device=run["device"],
        workload=run["workload"],
        device_busy=run["device_busy"],
    )
    return fixture, result


def test_every_workload_of_the_gpu_check_is_recorded() -> None:
    names = {path.stem for path in FIXTURES}
    assert names == {"device_bound", "data_bound", "hidden_loading", "launch_bound", "copy_bound"}
    for path in FIXTURES:
        meta = recorded(path)[0]["meta"]
        if meta["source"] == "gpu":  # a real GPU's run names it, its torch and its driver
            assert meta["gpu"] and meta["torch"] and meta["driver"]
        else:
            assert meta["source"] == "simulated device"


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_a_recorded_runs_figures_meet_its_synchronised_truth(path: Path) -> None:
    fixture, run = recorded(path)
    truth = fixture["truth"]
    assert run.samples_per_s == pytest.approx(truth["samples_per_s"], rel=0.03)
    # At the synchronised steps, each figure's median miss is within 10% of the step.
    records, split = run.records, {int(i): pair for i, pair in truth["split"].items()}
    assert split
    for k, figure in enumerate(("data_time", "batch_time")):
        misses = [abs(records[figure][i] - pair[k]) / sum(pair) for i, pair in split.items()]
        assert statistics.median(misses) <= 0.1, (figure, misses)
    # The figures add up: samples/s from the steady steps' data_time and batch_time.
    steady = run.steady
    assert steady.samples / steady.seconds == pytest.approx(run.samples_per_s)


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_the_doctor_names_the_limit_each_recorded_workload_was_built_to_have(path: Path) -> None:
    fixture, run = recorded(path)
    expected = fixture["workload"]["expect"]
    found = sorted(str(f.kind) for f in diagnose(run) if f.kind in LIMIT_KINDS)
    assert found == ([expected] if expected else [])


@pytest.mark.parametrize("path", FIXTURES, ids=[path.stem for path in FIXTURES])
def test_a_recorded_devices_split_tells_the_launch_bound_workload_apart(path: Path) -> None:
    """The device's own trace of a warm-up step against its timeline: busy, idle for input and
    idle waiting for launches add up to the step, and the last is most of batch_time exactly
    where the workload was built to wait on the host's launches."""
    fixture, run = recorded(path)
    split = run.device_split
    assert split.busy + split.input + split.launches == pytest.approx(run.step_time)
    waits = fixture["workload"]["waits_on_launches"]
    assert (split.launch_share >= LAUNCH_IDLE_SHARE) is waits, split
