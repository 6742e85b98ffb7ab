"""Overhead of SpeedProbe (with its system sampler) on the MLP lab, beside Lightning's SimpleProfiler.

A shared virtual machine drifts by 10-20% from one second to the next, far more than the 2%
being measured, so whole runs compared one after another cannot resolve it. Here the arms
are interleaved inside each training run instead: every `--block` steps the run switches,
in a shuffled order, between bare, SpeedProbe attached (its own setup/teardown hooks, sampler
included) and SimpleProfiler installed as the Trainer's profiler. A clock callback present
throughout times every step; the steps next to a switch are dropped. Each cycle (one block of
each arm) gives a ratio to its own bare block; the script prints the median of those ratios
and their interquartile range, over `--repeats` runs. Target: SpeedProbe <= 1.02.

    .venv/bin/python benchmarks/probe_overhead.py [--repeats 3] [--cycles 40] [--block 30]
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import tempfile
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.profilers import SimpleProfiler

from speedlab.labs import tabular_lab
from speedlab.probe import SpeedProbe

ARMS = ("bare", "speedprobe", "simpleprofiler")
SETTLE = 3  # steps dropped after each switch


class Rotation(pl.Callback):
    """Times every step and switches the arm every `block` steps, in a shuffled order."""

    def __init__(self, block: int, rng: random.Random) -> None:
        self.block, self.rng = block, rng
        self.probe = SpeedProbe()
        self.simple = SimpleProfiler(dirpath=tempfile.gettempdir(), filename="speedlab-simple")
        self.arm = "bare"  # block 0: the run's warm-up, not counted
        self.block_no = 0
        # (arm, block number, wall clock, main thread's CPU time) at each step's start
        self.steps: list[tuple[str, int, float, float]] = []

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        self.steps.append((self.arm, self.block_no, time.perf_counter(), time.thread_time()))

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, out: Any, batch: Any, i: int
    ) -> None:
        if trainer.global_step % self.block:
            return
        if self.block_no % len(ARMS) == 0:  # a new cycle: each arm once, in a new order
            self.cycle = self.rng.sample(ARMS, len(ARMS))
        self._switch(trainer, pl_module, self.cycle[self.block_no % len(ARMS)])
        self.block_no += 1

    def _switch(self, trainer: Any, pl_module: Any, arm: str) -> None:
        if self.arm == "speedprobe":
            self.probe.teardown(trainer, pl_module, "fit")
            trainer.callbacks.remove(self.probe)
        elif self.arm == "simpleprofiler":
            trainer.profiler = self.passthrough
        if arm == "speedprobe":
            trainer.callbacks.append(self.probe)  # after this callback: its hooks count
            self.probe.setup(trainer, pl_module, "fit")
        elif arm == "simpleprofiler":
            self.passthrough, trainer.profiler = trainer.profiler, self.simple
        self.arm = arm

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._switch(trainer, pl_module, "bare")

    def cycles(self, clock: int) -> list[dict[str, float]]:
        """Per cycle, each arm's median step time on `clock` (2: wall, 3: main thread's CPU),
        without the steps next to a switch."""
        blocks: dict[int, tuple[str, list[float]]] = {}
        for step, following in itertools.pairwise(self.steps):
            arm, block = step[:2]
            if block == following[1] and block > 0:
                blocks.setdefault(block, (arm, []))[1].append(following[clock] - step[clock])
        cycles: dict[int, dict[str, float]] = {}
        for block, (arm, times) in blocks.items():
            if len(times) > 2 * SETTLE:
                cycles.setdefault((block - 1) // len(ARMS), {})[arm] = statistics.median(
                    times[SETTLE:-1]
                )
        return [c for c in cycles.values() if len(c) == len(ARMS)]


def run(cycles: int, block: int, rng: random.Random) -> Rotation:
    """One training run of `cycles` cycles."""
    rotation = Rotation(block, rng)
    model, data = tabular_lab()
    trainer = pl.Trainer(
        max_steps=cycles * len(ARMS) * block + block,
        accelerator="cpu",
        devices=1,
        callbacks=[rotation],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, data)
    return rotation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--block", type=int, default=30)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    rotations = [run(args.cycles, args.block, rng) for _ in range(args.repeats)]
    print(
        f"MLP lab, {args.repeats} runs x {args.cycles} cycles of {args.block}-step blocks, "
        f"{args.threads} torch thread(s)"
    )
    for clock, name in ((2, "wall time"), (3, "main thread's CPU time")):
        cycles = [c for rotation in rotations for c in rotation.cycles(clock)]
        print(f"Median step {name}, {len(cycles)} complete cycles:")
        for arm in ARMS:
            ratios = [c[arm] / c["bare"] for c in cycles]
            q1, median, q3 = statistics.quantiles(ratios, n=4)
            step = statistics.median(c[arm] for c in cycles)
            print(
                f"  {arm:15s} {step * 1e3:6.3f} ms   ratio to bare {median:.3f} "
                f"(IQR {q1:.3f}-{q3:.3f})"
            )
        if clock == 2:
            ratio = statistics.median(c["speedprobe"] / c["bare"] for c in cycles)
    print(f"SpeedProbe overhead ratio (wall time): {ratio:.3f} (target <= 1.02)")


if __name__ == "__main__":
    main()
