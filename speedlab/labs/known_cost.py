"""Known-cost workload: a dataset and a model whose per-sample and per-step times are set.

Tests and lessons use it to check that what speedlab measures is what was spent:
``sleep_s`` stands for waiting on storage (the CPU is free), ``busy_s`` for decoding or
augmenting (the CPU is busy), ``step_s`` for the model's work.
"""

from __future__ import annotations

import time
from array import array
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, get_worker_info
from typing_extensions import override

_SLEEP_SLACK_S = 0.0002  # the OS wakes a sleeper late by about this much; spun instead


def busy_wait(seconds: float) -> None:
    """Keep the CPU busy for ``seconds`` (unlike ``time.sleep``, which frees it)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def exact_sleep(seconds: float) -> None:
    """Sleep ``seconds`` on the dot: ``time.sleep`` wakes late, so its last moment is spun.

    The CPU stays free for all but ``_SLEEP_SLACK_S`` of the wait, so it still reads as I/O.
    """
    end = time.perf_counter() + seconds
    if seconds > _SLEEP_SLACK_S:
        time.sleep(seconds - _SLEEP_SLACK_S)
    busy_wait(end - time.perf_counter())


class KnownCostDataset(Dataset):
    """``n`` samples, each costing ``sleep_s`` of waiting and ``busy_s`` of CPU work.

    Sample ``i`` is a fixed random vector of ``features`` floats (seeded by ``i``) and the
    label ``1`` if its sum is positive, else ``0``.

    Args:
        n: number of samples.
        sleep_s: seconds of ``time.sleep`` per sample (I/O-like).
        busy_s: seconds of busy-waiting per sample (CPU-like).
        features: length of each vector.
        slow_worker: id of a DataLoader worker whose samples cost ``slow_factor`` times as
            much, to make a straggler; None for none. Loading in the main process is never
            slowed.
        slow_factor: the straggler's cost multiplier.

    It keeps its own clock of each load in the process that loads it (``batch_seconds``), a
    truth to check speedlab's data_time against: what the loads took, not what they were set
    to take (a busy machine wakes a sleeper late).
    """

    def __init__(
        self,
        n: int = 10_000,
        *,
        sleep_s: float = 0.0,
        busy_s: float = 0.0,
        features: int = 8,
        slow_worker: int | None = None,
        slow_factor: float = 1.0,
    ) -> None:
        for name, value in {
            "sleep_s": sleep_s,
            "busy_s": busy_s,
            "slow_factor": slow_factor,
        }.items():
            if value < 0:
                raise ValueError(f"KnownCostDataset({name}={value!r}) is not valid. Expected >= 0.")
        self.n = n
        self.sleep_s = sleep_s
        self.busy_s = busy_s
        self.features = features
        self.slow_worker = slow_worker
        self.slow_factor = slow_factor
        self._clock = array("d")  # each load's start and end, in the order loaded here

    def __len__(self) -> int:
        return self.n

    @override
    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        start = time.perf_counter()
        worker = get_worker_info()
        factor = self.slow_factor if worker is not None and worker.id == self.slow_worker else 1
        if self.sleep_s:
            exact_sleep(self.sleep_s * factor)
        if self.busy_s:
            busy_wait(self.busy_s * factor)
        x = torch.randn(self.features, generator=torch.Generator().manual_seed(i))
        self._clock.extend((start, time.perf_counter()))
        return x, int(x.sum() > 0)

    def batch_seconds(self, batch_size: int) -> list[float]:
        """Seconds each whole batch of ``batch_size`` loads took by this dataset's clock, from
        its first load's start to its last load's end, in the order this process loaded them:
        with ``num_workers=0``, batch ``k`` is training step ``k``'s (each worker keeps a clock
        of its own, in its own process)."""
        if batch_size < 1:
            raise ValueError(f"batch_seconds(batch_size={batch_size!r}): expected an integer >= 1.")
        starts, ends = self._clock[0::2], self._clock[1::2]
        last = len(starts) - batch_size
        return [ends[k + batch_size - 1] - starts[k] for k in range(0, last + 1, batch_size)]


class KnownCostModel(pl.LightningModule):
    """A linear classifier whose training step busy-waits ``step_s`` after computing its loss.

    The step's time is therefore ``step_s`` plus a little, known in advance. It has no
    validation step, so it trains from a single DataLoader without complaint.

    Args:
        step_s: seconds of busy-waiting per training step.
        features: inputs per sample (match the dataset's).
        lr: SGD learning rate.
    """

    def __init__(self, step_s: float = 0.01, features: int = 8, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.step_s = step_s
        self.net = nn.Linear(features, 2)

    @override
    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss, batch_size=len(x))
        busy_wait(self.step_s)
        return loss

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def known_cost_loader(
    n: int = 10_000,
    batch_size: int = 8,
    sleep_s: float = 0.0,
    busy_s: float = 0.0,
    num_workers: int = 0,
    *,
    features: int = 8,
    slow_worker: int | None = None,
    slow_factor: float = 1.0,
    **loader_kw: Any,
) -> DataLoader:
    """A DataLoader over a ``KnownCostDataset``; ``loader_kw`` go to the DataLoader."""
    dataset = KnownCostDataset(
        n,
        sleep_s=sleep_s,
        busy_s=busy_s,
        features=features,
        slow_worker=slow_worker,
        slow_factor=slow_factor,
    )
    return DataLoader(dataset, batch_size=batch_size, num_workers=num_workers, **loader_kw)
