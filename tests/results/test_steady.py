"""The one rule for a run's steady figures: averages over whole rounds, pauses named."""

from __future__ import annotations

import pytest

from speedlab.results.steady import PAUSE_FACTOR, rounds, steady
from tests.records import run_of


def _records(walls: list[float], data: list[float] | None = None) -> dict:
    data = data or [0.0] * len(walls)
    return {
        "wall": walls,
        "data_time": data,
        "batch_time": [w - d for w, d in zip(walls, data)],
        "samples": [10] * len(walls),
    }


def test_rounds_are_whole_and_a_partial_last_one_is_left_out() -> None:
    assert rounds(range(7), 3) == [[0, 1, 2], [3, 4, 5]]
    assert rounds(range(3), 0) == [[0], [1], [2]]
    assert rounds(range(2), 4) == [[0, 1]]  # all there is
    assert rounds([], 2) == []


def test_a_single_pause_is_left_out_and_named_with_its_step() -> None:
    walls = [0.005] * 60
    walls[30] = 0.155
    s = steady(_records(walls), range(60), 0)
    assert [(p.step, p.seconds) for p in s.pauses] == [(30, 0.155)]
    assert s.pauses[0].typical == pytest.approx(0.005)
    assert 30 not in s.steps and len(s.steps) == 59
    assert s.samples_per_s == pytest.approx(10 / 0.005)


def test_a_long_round_must_also_be_long_in_seconds_to_be_a_pause() -> None:
    walls = [0.0003] * 60
    walls[10] = 0.004  # a scheduling hiccup: 13 times the step, 3.7 ms
    s = steady(_records(walls), range(60), 0)
    assert not s.pauses and len(s.steps) == 60


def test_long_rounds_that_recur_are_the_runs_cost_not_pauses() -> None:
    walls = [0.005] * 60
    for i in range(0, 60, 10):
        walls[i] = 0.2
    s = steady(_records(walls), range(60), 0)
    assert not s.pauses and s.recurring == 6 and len(s.steps) == 60
    assert s.step_time == pytest.approx(sum(walls) / 60)


def test_bursts_of_the_workers_are_not_pauses_and_count_by_their_average() -> None:
    """Eight workers in lockstep: one step waits 86 ms for the next eight batches, seven find
    theirs ready. That long step is 43 times the median one, yet it is how the run goes."""
    data = [0.084 if i % 8 == 0 else 0.0 for i in range(80)]
    walls = [d + 0.002 for d in data]
    s = steady(_records(walls, data), range(80), 8)
    assert not s.pauses and not s.recurring
    assert s.data_time == pytest.approx(0.084 / 8)
    assert s.typical_data == 0.0 and s.typical_step == pytest.approx(0.002)
    assert s.data_share == pytest.approx(s.data_time / s.step_time)
    assert s.samples_per_s == pytest.approx(10 / s.step_time)


def test_a_pause_in_a_round_of_workers_leaves_the_whole_round_out() -> None:
    data = [0.03 if i % 2 == 0 else 0.0 for i in range(40)]
    walls = [d + 0.005 for d in data]
    walls[21] += 0.5  # the main process paused in the second step of round 10
    s = steady(_records(walls, data), range(40), 2)
    assert [p.step for p in s.pauses] == [21]
    assert 20 not in s.steps and 21 not in s.steps
    assert s.data_time == pytest.approx(0.015)  # every kept round holds one wait


def test_a_collection_among_three_workers_rounds_is_a_pause() -> None:
    """Rounds of three 15 ms steps, one waiting for the workers: a full collection of a notebook
    kernel's heap (213 ms measured, Lightning, torch and IPython imported) in one of them makes
    that round 5.7 times the typical one, yet fourteen typical steps longer: a pause."""
    data = [0.010 if i % 3 == 0 else 0.0 for i in range(60)]
    walls = [d + 0.012 for d in data]
    walls[31] += 0.213
    s = steady(_records(walls, data), range(60), 3)
    assert [p.step for p in s.pauses] == [31]
    assert 30 not in s.steps and 31 not in s.steps and 32 not in s.steps
    assert s.step_time == pytest.approx(0.046 / 3)  # the rounds kept, whole


def test_a_run_with_one_150_ms_pause_is_as_fast_as_the_same_run_without() -> None:
    steady_steps = [0.005] * 60
    paused = list(steady_steps)
    paused[40] += 0.150
    a = run_of([0.0] * 61, [0.005, *steady_steps])
    b = run_of([0.0] * 61, [0.005, *paused])
    assert b.samples_per_s / a.samples_per_s == pytest.approx(1.0)
    assert [p.step for p in b.steady.pauses] == [41]
    assert PAUSE_FACTOR * 0.005 < 0.155


def test_a_full_collection_among_steps_alone_is_a_pause_by_what_it_is() -> None:
    """A 225 ms collection among 37 ms steps without workers: six steps long, under the rule of
    lengths (ten), averaged in without ``gc_time`` and named with it."""
    walls = [0.037] * 60
    walls[25] += 0.225
    unknown = steady(_records(walls), range(60), 0)
    assert not unknown.pauses and len(unknown.steps) == 60
    known = steady({**_records(walls), "gc_time": [0.0] * 25 + [0.225] + [0.0] * 34}, range(60), 0)
    assert [(p.step, p.collected) for p in known.pauses] == [(25, 0.225)]
    assert known.step_time == pytest.approx(0.037)


def test_a_short_collection_is_no_pause_and_many_are_the_runs_cost() -> None:
    walls = [0.037] * 60
    short = steady({**_records(walls), "gc_time": [0.0] * 59 + [0.019]}, range(60), 0)
    assert not short.pauses and len(short.steps) == 60
    every_tenth = [0.03 if i % 10 == 0 else 0.0 for i in range(60)]
    recurring = steady({**_records(walls), "gc_time": every_tenth}, range(60), 0)
    assert not recurring.pauses and recurring.recurring == 6 and len(recurring.steps) == 60


def test_long_rounds_rare_as_rounds_but_much_of_the_time_are_the_runs_cost() -> None:
    """Another process's 24 ms time slices among 1 ms steps: 2.5% of the rounds, over half the
    time; two such rounds are pauses, a full collection stays one whatever the time."""
    walls = [0.001] * 800
    for i in range(0, 800, 40):
        walls[i] = 0.024
    s = steady(_records(walls), range(800), 0)
    assert not s.pauses and s.recurring == 20 and len(s.steps) == 800
    two = [0.001] * 800
    two[100] = two[500] = 0.024  # 46 ms over 798 ms of usual steps: 5.8%
    assert [p.step for p in steady(_records(two), range(800), 0).pauses] == [100, 500]
    collected = [0.0] * 800
    for i in range(0, 800, 40):
        collected[i] = 0.022
    s = steady({**_records(walls), "gc_time": collected}, range(800), 0)
    assert len(s.pauses) == 20 and not s.recurring
