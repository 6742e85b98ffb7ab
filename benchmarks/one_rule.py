"""Benchmark: do a run's figures agree with each other and with the wall clock?

Two known-cost cells, profiled as a learner would (``profile_train``):

1. **A bursty loader.** Three workers, each sleeping 4 ms a sample for batches of 16 (64 ms a
   batch), feed a 10 ms step: at most three batches every 64 ms, handed over in bursts. Printed
   side by side, from the same steps: the wall clock's samples/s (a callback's stamps), the
   table's samples/s, what the table's data_time + batch_time imply (batch / step_time), and
   what the medians of the same steps would imply (the rule before one rule read every figure).
2. **A pause.** The same 5 ms step trained twice in one cell, the second with one 150 ms sleep
   among its steady steps: the speedup shown, its verdict, and the speedup with the pause
   averaged in.

Usage::

    python benchmarks/one_rule.py

Exits with 1 when a figure misses its target (implied within 10% of shown; shown within 10% of
the wall clock; the pause's speedup within 10% of 1.0 and not "slower").
"""

from __future__ import annotations

import statistics
import sys
import time

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER, KnownCostDataset, KnownCostModel


class Stamps(pl.Callback):
    """The wall clock at the end of every training step."""

    def __init__(self) -> None:
        self.ends: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.ends.append(time.perf_counter())


class Pausing(KnownCostModel):
    """KnownCostModel that stops 150 ms in step 30, as a garbage collection would."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if batch_idx == 30:
            time.sleep(0.150)
        return loss


def bursty() -> bool:
    stamps = Stamps()

    def train() -> None:
        trainer = pl.Trainer(max_steps=90, accelerator="cpu", callbacks=[stamps], **QUIET_TRAINER)
        loader = DataLoader(KnownCostDataset(4000, sleep_s=0.004), batch_size=16, num_workers=3)
        trainer.fit(KnownCostModel(step_s=0.010), loader)

    [run] = profile_train(train, live=False, store=False).runs
    steps = run.steady.steps
    first, last = steps[0], steps[-1]
    truth = 16 * (last - first + 1) / (stamps.ends[last] - stamps.ends[first - 1])
    implied = 16 / run.step_time
    r = run.records
    medians = 16 / (
        statistics.median(r["data_time"][i] for i in steps)
        + statistics.median(r["batch_time"][i] for i in steps)
    )
    print("bursty loader: 3 workers x 64 ms a batch of 16, 10 ms step")
    print(f"  wall clock               {truth:8.1f} samples/s")
    print(f"  shown                    {run.samples_per_s:8.1f} samples/s")
    print(
        f"  implied by the table     {implied:8.1f} samples/s  (data_time "
        f"{run.data_time * 1e3:.2f} ms + batch_time {run.batch_time * 1e3:.2f} ms)"
    )
    print(f"  implied by the medians   {medians:8.1f} samples/s  (the rule before)")
    print(
        f"  implied / shown {implied / run.samples_per_s:.3f}, shown / wall clock "
        f"{run.samples_per_s / truth:.3f}, medians / shown {medians / run.samples_per_s:.3f}"
    )
    return (
        abs(implied / run.samples_per_s - 1) <= 0.10 and abs(run.samples_per_s / truth - 1) <= 0.10
    )


def pause() -> bool:
    def train() -> None:
        for model in (KnownCostModel(step_s=0.005), Pausing(step_s=0.005)):
            trainer = pl.Trainer(max_steps=60, accelerator="cpu", **QUIET_TRAINER)
            trainer.fit(model, DataLoader(KnownCostDataset(2000), batch_size=8))

    base, paused = profile_train(train, live=False, store=False).runs
    walls = [
        paused.records["wall"][i] for i, p in enumerate(paused.records["phase"]) if p == "steady"
    ]
    with_pause = (8 * len(walls) / sum(walls)) / base.samples_per_s
    verdict = paused.comparison.verdict
    print("one 150 ms pause among 5 ms steps, against the same cell without it")
    print(f"  pauses named             {[p.step + 1 for p in paused.steady.pauses]}")
    print(f"  speedup shown            {paused.speedup:.3f}x, {verdict}")
    print(f"  with the pause averaged in {with_pause:.3f}x")
    return abs(paused.speedup - 1) <= 0.10 and str(verdict) != "slower"


if __name__ == "__main__":
    ok = bursty()
    ok = pause() and ok
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)
