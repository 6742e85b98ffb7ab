"""Overhead of SpeedProbe (with its system sampler) on the MLP lab, beside Lightning's SimpleProfiler.

Each arm trains the same MLP for the same steps; arms are interleaved and repeated, and a tiny
clock callback present in every arm times the steady steps. Prints median step times and the
ratios to the bare run. Target: SpeedProbe <= 1.02.

    .venv/bin/python benchmarks/probe_overhead.py [--repeats 7] [--steps 300]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import lightning.pytorch as pl

from speedlab.labs import tabular_lab
from speedlab.probe import SpeedProbe

WARMUP = 20


class Clock(pl.Callback):
    """Wall time per step from the first steady step to the last: same cost in every arm."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.stamps.append(time.perf_counter())

    def step_time(self) -> float:
        steady = self.stamps[WARMUP:]
        return (steady[-1] - steady[0]) / (len(steady) - 1)


def run(arm: str, steps: int) -> float:
    clock = Clock()
    callbacks: list[pl.Callback] = [clock]
    profiler = None
    if arm == "speedprobe":
        callbacks.append(SpeedProbe())
    elif arm == "simpleprofiler":
        profiler = "simple"
    model, data = tabular_lab()
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
        profiler=profiler,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(model, data)
    return clock.step_time()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    arms = ["bare", "speedprobe", "simpleprofiler"]
    times: dict[str, list[float]] = {arm: [] for arm in arms}
    run("bare", WARMUP + 10)  # imports, data generation, allocator warm-up
    rng = random.Random(0)
    for _ in range(args.repeats):
        for arm in rng.sample(arms, len(arms)):
            times[arm].append(run(arm, args.steps))
    base = statistics.median(times["bare"])
    print(f"MLP lab, {args.steps} steps x {args.repeats} interleaved repeats, median step time:")
    for arm in arms:
        median = statistics.median(times[arm])
        print(f"  {arm:15s} {median * 1e3:7.3f} ms   ratio to bare {median / base:.3f}")
    ratio = statistics.median(times["speedprobe"]) / base
    print(f"SpeedProbe overhead ratio: {ratio:.3f} (target <= 1.02)")


if __name__ == "__main__":
    main()
