"""How much profiling slows a cell whose DataLoader has workers: the cell alone against the
same cell under speedlab, its steps timed by the same callback in both.

The cell: KnownCostModel busy-waiting 10 ms a step on a loader that sleeps 3 ms a sample
(24 ms a batch) in 3 workers, so the step is its compute and the hand-over of a ready batch.
Each round trains three fits in a new shuffled order: alone, alone again (the A/A control, whose
spread is the measurement's noise floor) and under ``speedlab.profile_train`` (``steps=None``:
the cell trains as written). A fit's figure is the mean wall time of its steps after the first
``WARMUP`` (the mean, so stalls count); a round's ratio is the profiled fit's figure over the
mean of its two alone fits, and the control's is one alone fit over the other.

Why: speedlab samples the machine at 4 Hz while a cell trains, workers included, and on a
busy small machine whatever that reading costs lands on the training. This script found its
reading of every worker's own pages (smaps_rollup, 13 ms of page-table walk a worker here) at
every sample slowing this cell by 18% on 2 cores; the target is what the A/A control cannot
tell apart.

    .venv/bin/python benchmarks/workers_overhead.py [--rounds 8] [--batches 150]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable

import lightning.pytorch as pl

import speedlab
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader

WARMUP = 20
TARGET = 1.02
"""The most the median profiled fit may take over the alone fits (2%)."""


class StepClock(pl.Callback):
    """Wall time from one batch's start to the next: a whole step, its wait for data included."""

    def __init__(self) -> None:
        self.starts: list[float] = []

    def on_train_batch_start(self, *args: object) -> None:
        self.starts.append(time.perf_counter())

    def mean_step(self) -> float:
        steps = [b - a for a, b in zip(self.starts, self.starts[1:], strict=False)]
        return statistics.fmean(steps[WARMUP:])


def cell(clock: StepClock, batches: int) -> Callable[[], None]:
    """The notebook cell: the known-cost model on its sleeping loader in 3 workers."""

    def train() -> None:
        loader = known_cost_loader(n=8 * batches, sleep_s=0.003, num_workers=3)
        trainer = pl.Trainer(max_epochs=1, callbacks=[clock], **QUIET_TRAINER)
        trainer.fit(KnownCostModel(step_s=0.010), loader)

    return train


def fit(arm: str, batches: int) -> float:
    """One fit of the cell, alone or under speedlab: its mean step time in seconds."""
    clock = StepClock()
    train = cell(clock, batches)
    if arm == "speedlab":
        speedlab.profile_train(train, steps=None, live=False, store=False)
    else:
        train()
    return clock.mean_step()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--batches", type=int, default=150)
    args = parser.parse_args()
    profiled, control = [], []
    for round_ in range(args.rounds):
        arms = ["alone", "again", "speedlab"]
        random.shuffle(arms)
        step = {arm: fit(arm, args.batches) for arm in arms}
        alone = statistics.fmean([step["alone"], step["again"]])
        profiled.append(step["speedlab"] / alone)
        control.append(step["again"] / step["alone"])
        print(
            f"round {round_ + 1}: alone {step['alone'] * 1e3:.2f} ms, again "
            f"{step['again'] * 1e3:.2f} ms, speedlab {step['speedlab'] * 1e3:.2f} ms a step",
            flush=True,
        )
    ratio = statistics.median(profiled)
    print(
        f"speedlab / alone: median {ratio:.3f} (rounds {min(profiled):.3f} to "
        f"{max(profiled):.3f}); A/A control: median {statistics.median(control):.3f} "
        f"({min(control):.3f} to {max(control):.3f})"
    )
    held = ratio <= TARGET
    print(f"{'PASS' if held else 'FAIL'}: speedlab's median slowdown at most {TARGET:.2f}x")
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
