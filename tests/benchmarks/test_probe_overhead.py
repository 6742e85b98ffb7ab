"""benchmarks/probe_overhead.py: the rotation that times each arm's cost a step."""

from __future__ import annotations

import random
import statistics
from typing import Any

import lightning.pytorch as pl

from benchmarks.probe_overhead import run
from speedlab.labs.known_cost import busy_wait

PERIOD = 8
WAIT_S = 0.002  # every PERIOD steps: 250 us a step


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
