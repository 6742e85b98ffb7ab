"""benchmarks/probe_overhead.py: the rotation that times each arm's cost a step."""

from __future__ import annotations

import random
import statistics
from typing import Any

import lightning.pytorch as pl
import pytest

from benchmarks.probe_overhead import run
from speedlab.labs.known_cost import busy_wait

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
    """A block's median step would read it as nothing; its mean reads its share."""
    more = {"eighth": EveryEighthStep(WAIT_S), "hook": EveryEighthStep(0.0)}
    rotation = run("zero-cost step", 3, 120, random.Random(0), "wall", more)
    added = statistics.median(c["eighth"] - c["hook"] for c in rotation.cycles())
    assert 0.5 * WAIT_S / PERIOD < added < 2 * WAIT_S / PERIOD
    # On another clock (gpu_check's CPU time), each step its own stamps: here twice the wall's
    twice = rotation.cycles([2 * step[2] for step in rotation.steps])
    for doubled, cycle in zip(twice, rotation.cycles(), strict=True):
        assert doubled == pytest.approx({arm: 2 * t for arm, t in cycle.items()})
