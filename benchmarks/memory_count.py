"""Peak memory of a run with many workers: speedlab's figure against the machine's real use.

A Lightning run trains on a 400 MB in-memory dataset with 4 DataLoader workers that read all of
it (forked, so they share its pages). Three figures, taken in the same run:

- speedlab: the run's ``peak_rss_bytes`` (main RSS plus each worker's own pages);
- summed RSS: the main process's RSS plus every worker's, as adding RSS would give;
- machine: the growth of the machine's used memory (total - available) over the run, plus
  the main process's RSS before it, sampled at 20 Hz (the truth, give or take other processes).

    .venv/bin/python benchmarks/memory_count.py
"""

from __future__ import annotations

import threading

import lightning.pytorch as pl
import psutil
import torch
from torch.utils.data import DataLoader, Dataset

import speedlab
from speedlab.labs import QUIET_TRAINER, KnownCostModel

WORKERS = 4
FEATURES = 8


class SharedRows(Dataset):
    """400 MB of rows, written in the main process; each process reads all of it at its first
    sample (as a dataset that computes its statistics would), so every worker maps every page."""

    def __init__(self, megabytes: int = 400) -> None:
        self.block = torch.ones(megabytes, 2**18)  # float32, 1 MB a row
        self.scale: float | None = None

    def __len__(self) -> int:
        return 4096

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.scale is None:
            self.scale = float(self.block.mean())
        return self.block[i % len(self.block), :FEATURES] * self.scale, torch.tensor(i % 2)


class Sampler(threading.Thread):
    """The machine's used memory and the summed RSS of this process tree, at 20 Hz."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.me = psutil.Process()
        self.used_before = _used()
        self.rss_before = self.me.memory_info().rss
        self.used_peak = self.summed_peak = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.used_peak = max(self.used_peak, _used())
            tree = [self.me, *self.me.children(recursive=True)]
            summed = 0
            for p in tree:
                try:
                    summed += p.memory_info().rss
                except psutil.Error:
                    continue
            self.summed_peak = max(self.summed_peak, summed)


def _used() -> int:
    memory = psutil.virtual_memory()
    return memory.total - memory.available


def main() -> None:
    data = SharedRows()
    loader = DataLoader(data, batch_size=8, num_workers=WORKERS)

    def train() -> None:
        pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER).fit(
            KnownCostModel(step_s=0.002, features=FEATURES), loader
        )

    sampler = Sampler()
    sampler.start()
    result = speedlab.profile_train(train, steps=200, store=False, live=False)
    sampler.stop.set()
    sampler.join()
    truth = sampler.used_peak - sampler.used_before + sampler.rss_before
    ours = result.runs[-1].system.peak_rss_bytes
    mb = 2**20
    print(f"{WORKERS} workers reading a {data.block.nbytes / mb:.0f} MB dataset")
    print(f"machine (used growth + main RSS before): {truth / mb:7.0f} MB")
    print(f"speedlab peak_rss_bytes:                 {ours / mb:7.0f} MB  ({ours / truth:.2f}x)")
    print(
        f"summed RSS of main and workers:          {sampler.summed_peak / mb:7.0f} MB  "
        f"({sampler.summed_peak / truth:.2f}x)"
    )


if __name__ == "__main__":
    main()
