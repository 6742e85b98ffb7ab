"""benchmarks/probe_overhead.py: the pairs of steps that time each arm's cost a step on the CPU,
and the rotation of blocks that gpu-check times a GPU's steps with."""

from __future__ import annotations

import itertools
import random
import statistics
from typing import Any

import lightning.pytorch as pl
import pytest

import benchmarks.probe_overhead as probe_overhead
from benchmarks.probe_overhead import (
    ARMS,
    KNOWN,
    KNOWN_S,
    PAIRED_ARMS,
    SETTLE,
    WARM,
    StepPairs,
    fit_lab,
    known_missed,
    readings_cost,
    run,
)
from speedlab.labs.known_cost import busy_wait
from tests.doctor_runs import require_quiet, watched

PERIOD = 8
WAIT_S = 0.02  # every PERIOD steps: 2.5 ms a step
# Well above how far this machine's steps drift between one arm's block and the next: with 2 ms
# (250 us a step) the test read 515 us in one run of six, on a 2-core machine whose zero-cost
# steps took 1.0 to 2.8 ms a block within one fit (2026-11-30). At 20 ms, eight fits read 2.50
# to 3.15 ms a step; a block's median reads none of it.


class EveryEighthStep(pl.Callback):
    """A known cost paid every eighth step, as a probe reads its device's timeline; with
    ``wait_s`` 0, the hook alone (Lightning's dispatch of it costs every step)."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s, self.steps = wait_s, 0

    def on_train_batch_end(self, *args: Any) -> None:
        self.steps += 1
        if not self.steps % PERIOD:
            busy_wait(self.wait_s)


def test_a_cost_paid_every_few_steps_is_read_as_its_share_of_each_step() -> None:
    """A block's median step would read it as nothing; its mean reads its share. Five cycles:
    with three, a median of three blocks an arm, the arms read 2 ms a step off their share in
    two runs of about eight on 2026-12-01 (a machine 35% slower than the day before)."""
    more = {"eighth": EveryEighthStep(WAIT_S), "hook": EveryEighthStep(0.0)}
    rotation, machine = watched(
        lambda: run("zero-cost step", 5, 120, random.Random(0), "wall", more)
    )
    paired = rotation.paired()
    added = {arm: statistics.median(p.step - p.bare for p in paired[arm]) for arm in more}
    # On another clock (gpu_check's CPU time), each step its own stamps: here twice the wall's
    twice = rotation.paired([2 * step[2] for step in rotation.steps])
    for arm, pairs in paired.items():
        assert [x for p in twice[arm] for x in p] == pytest.approx(
            [2 * x for p in pairs for x in p]
        )
    require_quiet(machine)
    assert 0.5 * WAIT_S / PERIOD < added["eighth"] - added["hook"] < 2 * WAIT_S / PERIOD, added


def test_bare_runs_every_other_block_and_each_arm_once_a_cycle_between() -> None:
    rotation = run("zero-cost step", 2, 2 * SETTLE + 4, random.Random(1), "wall")
    arms = [arm for arm, block in dict.fromkeys((a, b) for a, b, _ in rotation.steps)]
    assert arms[:2] == ["bare", "bare"]  # the warm-up block, then the first cycle
    cycles = [arms[1 + i : 1 + i + rotation.blocks_a_cycle] for i in (0, rotation.blocks_a_cycle)]
    for cycle in cycles:
        assert cycle[::2] == ["bare"] * (len(ARMS) - 1)
        assert sorted(cycle[1::2]) == sorted(ARMS[1:])
    assert cycles[0][1::2] != cycles[1][1::2]  # shuffled anew each cycle (this seed's draw)
    assert {arm: len(p) for arm, p in rotation.paired().items()} == dict.fromkeys(ARMS[1:], 2)


def test_an_even_drift_of_the_machine_cancels_against_the_bare_blocks_either_side() -> None:
    """Steps that slow by the same amount each step, whatever the arm, read as no cost."""
    rotation = run("zero-cost step", 2, 2 * SETTLE + 4, random.Random(2), "wall")
    drifting = list(itertools.accumulate(1e-3 + 1e-7 * i for i in range(len(rotation.steps))))
    for arm, pairs in rotation.paired(drifting).items():
        assert [p.step - p.bare for p in pairs] == pytest.approx([0.0, 0.0], abs=1e-12), arm
        assert all(p.step > 1e-3 for p in pairs)


def test_a_known_answer_read_outside_nought_to_twice_itself_says_the_method_missed() -> None:
    assert known_missed(KNOWN_S * 1e6) == known_missed(0.0) == known_missed(2 * KNOWN_S * 1e6) == ""
    assert known_missed(55.9) == "; the known cost read 5.6 times itself (allowed 0 to 2)"
    assert "-0.5 times" in known_missed(-5.0)


class Observer(pl.Callback):
    """After StepPairs' switch, whether each step runs with the probe's wrapper of the
    optimizer loop's ``run`` (the probe's per-step path), with the probe among the callbacks
    (never in a step, as in its own fits), and with SimpleProfiler."""

    def __init__(self, pairs: StepPairs) -> None:
        self.pairs, self.seen = pairs, []

    def on_train_batch_start(self, trainer: Any, *args: Any) -> None:
        self.trainer, run = trainer, trainer.fit_loop.epoch_loop.automatic_optimization.run
        listed = self.pairs.probe in trainer.callbacks
        self.seen.append((getattr(run, "__self__", None) is None, listed, trainer.profiler))


def test_each_pair_has_its_arm_on_in_one_step_and_off_in_the_other(monkeypatch) -> None:
    """Including the probe's wrappers, which are off in every step but its arm's on-steps."""
    monkeypatch.setattr(probe_overhead, "KNOWN_S", 1e-3)
    pairs = StepPairs(random.Random(3))
    observer = Observer(pairs)
    steps = WARM + SETTLE + 600

    class Both(pl.Callback):  # StepPairs' hooks first, then the observer's
        def on_train_batch_start(self, *args: Any) -> None:
            pairs.on_train_batch_start(*args)
            observer.on_train_batch_start(*args)

        def on_train_end(self, *args: Any) -> None:
            pairs.on_train_end(*args)

    _, machine = watched(lambda: fit_lab("zero-cost step", steps, Both()))
    paired = pairs.steps[WARM + SETTLE :]
    assert len(paired) == steps - WARM - SETTLE - 1  # the last step has no end stamp
    for first, second in zip(paired[::2], paired[1::2], strict=False):
        assert first[0] == second[0] and first[1] != second[1]
    assert {arm for arm, *_ in paired} == set(PAIRED_ARMS)
    for (arm, on, *_), (wrapped, listed, profiler) in zip(paired, observer.seen[WARM + SETTLE :]):
        assert wrapped == (arm == "speedprobe" and on) and not listed
        assert (profiler is pairs.simple) == (arm == "simpleprofiler" and on)
    probe_on = sum(1 for arm, on, *_ in pairs.steps if (arm, on) == ("speedprobe", True))
    assert len(pairs.probe.records["batch_time"]) == probe_on  # the probe's settling steps too
    assert len(pairs.logs) == probe_on // pairs.probe.log_every_n_steps
    # Afterwards the loop's method is its class's again, and the trainer's profiler its own
    loop = observer.trainer.fit_loop.epoch_loop.automatic_optimization
    assert "run" not in vars(loop) and observer.trainer.profiler is not pairs.simple
    assert pairs.probe in observer.trainer.callbacks  # listed as the fit ends
    assert pairs.probe._result is not None  # so its teardown ran, and built its result
    differences = pairs.pairs()
    require_quiet(machine)
    assert 0.8e-3 < statistics.median(differences[KNOWN]) < 1.5e-3
    assert abs(statistics.median(differences["bare-again"])) < 0.3e-3


def heavy_tailed_steps(delay_s: float, rng: random.Random) -> tuple[list, list[float]]:
    """200,000 steps of 2 ms and more (a Pareto tail: a tenth over 3.2 ms), and a reading every
    quarter second that adds ``delay_s`` to the step it falls in."""
    steps, readings, now, due = [], [], 0.0, 0.1
    for _ in range(200_000):
        length = 1e-3 + rng.paretovariate(3.0) * 1e-3
        while due < now + length:
            readings.append(due)
            length += delay_s
            due += 0.25
        steps.append((now, now + length))
        now += length
    return steps, readings


def test_a_reading_costs_its_known_delay_and_the_long_steps_it_lands_in_cancel() -> None:
    """Times drawn at random fall in the long steps, which alone read 0.22 to 0.40 ms a
    reading over eight seeds; with the phantoms halfway between readings, -0.07 to +0.13, and a
    known 1 ms 0.90 to 1.09 (the tolerances below)."""
    rng = random.Random(5)
    steps, readings = heavy_tailed_steps(0.0, rng)
    per_reading = len(steps) / len(readings)
    assert abs(readings_cost(steps, readings) * per_reading) < 0.15e-3
    steps, readings = heavy_tailed_steps(1e-3, rng)
    per_reading = len(steps) / len(readings)
    assert readings_cost(steps, readings) * per_reading == pytest.approx(1e-3, rel=0.15)


def test_pairs_that_hold_a_reading_are_left_to_its_own_count(monkeypatch) -> None:
    """The probe's readings fall in its own on-steps only (0.4 ms in one of its twenty here):
    in the pairs, they would move its median where steps jitter (here +-200 us), which is
    why the pairs they touch are left out (``readings_cost`` counts them); then the known
    5 us reads within 3 us, and 10 us more with them in."""
    rng = random.Random(11)
    pairs, now, readings = StepPairs(rng), 0.0, []

    def step(arm: str, on: bool, length: float) -> None:
        nonlocal now
        pairs.steps.append((arm, on, now, now + length))
        now += length

    for _ in range(WARM + SETTLE):
        step("bare", False, 2e-3)
    for _ in range(40_000):
        arm, jitter = rng.choice(PAIRED_ARMS), rng.uniform(-200e-6, 200e-6)
        on = 2e-3 + jitter + (5e-6 if arm == "speedprobe" else 0.0)
        if arm == "speedprobe" and rng.random() < 0.05:
            readings.append(now + on / 2)
            on += 0.4e-3
        step(arm, True, on)
        step(arm, False, 2e-3)
    monkeypatch.setattr(pairs, "readings", lambda: readings)
    assert statistics.median(pairs.pairs()["speedprobe"]) == pytest.approx(5e-6, abs=3e-6)
    monkeypatch.setattr(pairs, "readings", list)
    assert statistics.median(pairs.pairs()["speedprobe"]) > 15e-6
