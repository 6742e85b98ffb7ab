"""RunResult: figures derived from the step records, their spread, serialisation."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from speedlab.results.run import RunResult
from tests.records import run_of as run


def test_figures_are_steady_state_averages_that_add_up() -> None:
    r = run([9.0, 0.1, 0.2, 0.3], [9.0, 0.4, 0.5, 0.9])
    assert r.steps == 4
    assert r.samples == 40
    assert r.data_time == pytest.approx(0.2)
    assert r.batch_time == pytest.approx(0.6)
    assert r.step_time == pytest.approx(0.8)
    assert r.data_share == pytest.approx(0.2 / 0.8)
    # throughput counts the steady steps only: 30 samples over 0.5 + 0.7 + 1.2 seconds
    assert r.samples_per_s == pytest.approx(30 / 2.4)
    assert r.samples_per_s == pytest.approx(10 / (r.data_time + r.batch_time))
    assert r.data_summary.p10 < r.data_time < r.data_summary.p90


def test_batch_time_is_the_rest_of_the_step_with_the_loops_own_work() -> None:
    r = run([0.1] * 6, [0.5] * 6)
    r.records["wall"][:] = [0.7] * 6  # 0.1 s of hooks and logging after each training batch
    assert r.batch_time == pytest.approx(0.6) and r.steady.loop_time == pytest.approx(0.1)
    assert r.samples_per_s == pytest.approx(10 / 0.7)


def test_no_steady_state_gives_nan_not_zero() -> None:
    r = run([0.1], [0.1], warmup=5)
    assert math.isnan(r.data_time) and math.isnan(r.samples_per_s)
    assert "samples/s" in r.summary_line()


def test_the_spread_of_a_run_with_workers_is_over_windows_of_whole_rounds() -> None:
    # Two workers deliver in bursts: two batches at once, then a wait for the next two.
    bursty = run([0.0, 0.3] * 10, [0.1] * 20, knobs={"workers": 2}, warmup=0)
    spread = bursty.throughput_summary
    assert spread.n == 5  # 20 steps in windows of 4
    assert spread.median == pytest.approx(40 / 1.0) and spread.iqr == pytest.approx(0.0)
    one_by_one = run([0.0, 0.3] * 10, [0.1] * 20, knobs={"workers": 0}, warmup=0)
    assert one_by_one.throughput_summary.n == 20
    assert one_by_one.throughput_summary.iqr == pytest.approx(100 - 25)
    # A short run keeps five windows: here of one round, two steps.
    assert run([0.0, 0.3] * 6, [0.1] * 12, knobs={"workers": 2}, warmup=0).throughput_summary.n == 6
    # Three workers, one of them slow: windows of three steps hold one batch of each worker.
    three = run([0.0, 0.0, 0.3] * 8, [0.1] * 24, knobs={"workers": 3}, warmup=0)
    assert three.throughput_summary.n == 8
    assert three.throughput_summary.iqr == pytest.approx(0.0)


def test_busy_child_processes_are_not_loader_workers_when_the_probe_saw_the_loader() -> None:
    # torch.compile's compile workers are busy children too; the loader had none.
    compiled = replace(
        run([0.1] * 10, [0.1] * 10, warmup=0),
        system={"workers_cpu_percent": 180.0, "peak_workers": 5},
        workload={"loader_workers": 0},
    )
    assert compiled.loader_workers() == 0
    stored = replace(compiled, workload={})  # a result stored before the probe recorded its loaders
    assert stored.loader_workers() == 5


def test_round_trip_through_dict_and_json() -> None:
    r = replace(
        run([0.1, 0.2, 0.3], [0.3, 0.3, 0.3], knobs={"workers": 2}),
        notes=["a note"],
        phases={"setup": 1.5},
        host_syncs={"steps": 3, "lines": [{"file": "train.py", "line": 7, "count": 3}]},
    )
    back = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.to_dict() == r.to_dict()
    assert back.samples_per_s == r.samples_per_s


def test_the_full_collections_of_each_step_come_back_and_keep_a_pause_named() -> None:
    r = run([0.0] * 61, [0.037] * 25 + [0.262] + [0.037] * 35)
    r.records["gc_time"] = [0.0] * 25 + [0.225] + [0.0] * 35
    back = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.records["gc_time"] == r.records["gc_time"]
    assert [p.step for p in back.steady.pauses] == [25]
    assert "gc_time" not in RunResult.from_dict(run([0.0], [0.1]).to_dict()).records  # unknown
