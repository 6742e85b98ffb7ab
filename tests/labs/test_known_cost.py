"""Tests for speedlab.labs.known_cost: the costs it promises are the costs it spends."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from speedlab.labs.known_cost import KnownCostDataset, KnownCostModel, busy_wait, known_cost_loader

SLACK_S = 0.02  # what a busy 2-core box may add to a short wait


def timed(fn, *args) -> tuple[float, float]:
    """Wall and CPU seconds of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def on_cpu_or_waiting(fn, *args) -> tuple[float, float]:
    """Wall seconds of one call, and the seconds this thread ran or waited for a core in it
    (Linux's schedstat): a thread that keeps the CPU busy is one or the other all along,
    however busy the machine; a sleeping one is neither."""

    def ran_and_waited() -> float:
        # The time run from the thread's CPU clock (schedstat's own is a scheduler tick late).
        with open("/proc/thread-self/schedstat") as f:
            waited = int(f.read().split()[1])
        return time.thread_time() + waited / 1e9

    wall, busy = time.perf_counter(), ran_and_waited()
    fn(*args)
    return time.perf_counter() - wall, ran_and_waited() - busy


@pytest.mark.skipif(not Path("/proc/thread-self/schedstat").exists(), reason="needs schedstat")
def test_busy_wait_keeps_the_cpu_busy_and_sleep_does_not() -> None:
    wall, busy = on_cpu_or_waiting(busy_wait, 0.05)
    assert 0.05 <= wall < 0.05 + SLACK_S * 5
    assert busy > 0.9 * wall
    wall, busy = on_cpu_or_waiting(time.sleep, 0.05)
    assert busy < 0.2 * wall


@pytest.mark.parametrize(
    ("kw", "cost", "busy"),
    [({"sleep_s": 0.01}, 0.01, False), ({"busy_s": 0.01}, 0.01, True)],
    ids=["sleep", "busy"],
)
def test_sample_costs_what_it_says(kw: dict, cost: float, busy: bool) -> None:
    data = KnownCostDataset(100, **kw)
    walls, cpus = zip(*(timed(data.__getitem__, i) for i in range(7)), strict=True)
    assert min(walls) >= cost
    assert statistics.median(walls) < cost + SLACK_S
    assert (statistics.median(cpus) > 0.5 * cost) == busy


def test_samples_are_fixed_vectors_with_a_sum_label() -> None:
    data = KnownCostDataset(50, features=5)
    assert len(data) == 50
    x, y = data[3]
    assert (x.shape, x.dtype) == ((5,), torch.float32)
    assert torch.equal(data[3][0], x) and not torch.equal(data[4][0], x)
    assert y == int(x.sum() > 0)
    assert {data[i][1] for i in range(50)} == {0, 1}


def test_the_dataset_clocks_each_batch_it_loads_as_a_loop_over_it_does() -> None:
    loader = known_cost_loader(n=44, batch_size=8, sleep_s=0.002)
    outside = []
    batches = iter(loader)
    for _ in range(5):
        start = time.perf_counter()
        next(batches)
        outside.append(time.perf_counter() - start)
    clock = loader.dataset.batch_seconds(8)
    assert len(clock) == 5  # whole batches only: 40 loads of the 44
    # The clock spans a batch's loads; the loop's wait adds the sampler and the collate.
    assert all(0.016 <= c <= o < c + SLACK_S for c, o in zip(clock, outside, strict=True))
    assert loader.dataset.batch_seconds(40) == [pytest.approx(sum(clock), abs=SLACK_S)]
    with pytest.raises(
        ValueError, match=r"batch_seconds\(batch_size=0\): expected an integer >= 1"
    ):
        loader.dataset.batch_seconds(0)


def test_negative_costs_are_refused() -> None:
    with pytest.raises(ValueError, match=r"KnownCostDataset\(busy_s=-0.1\) is not valid"):
        KnownCostDataset(busy_s=-0.1)


class TimedSamples(Dataset):
    """Returns, for each sample of ``inner``, the seconds it took and the worker that made it."""

    def __init__(self, inner: Dataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int) -> tuple[float, int]:
        start = time.perf_counter()
        self.inner[i]
        return time.perf_counter() - start, get_worker_info().id


def test_slow_worker_is_slowed_by_its_factor() -> None:
    data = KnownCostDataset(8, sleep_s=0.01, slow_worker=1, slow_factor=5)
    by_worker: dict[int, list[float]] = {0: [], 1: []}
    for seconds, workers in DataLoader(TimedSamples(data), batch_size=2, num_workers=2):
        for s, worker in zip(seconds.tolist(), workers.tolist(), strict=True):
            by_worker[worker].append(s)
    assert len(by_worker[0]) == len(by_worker[1]) == 4
    assert min(by_worker[1]) >= 0.05
    assert statistics.median(by_worker[0]) < 0.01 + SLACK_S
    assert timed(data.__getitem__, 0)[0] < 0.01 + SLACK_S  # the main process is never slowed


def test_loader_runs_in_two_worker_processes() -> None:
    loader = known_cost_loader(n=40, batch_size=8, busy_s=0.001, num_workers=2, drop_last=True)
    assert (loader.num_workers, loader.drop_last, loader.dataset.busy_s) == (2, True, 0.001)
    batches = list(loader)
    assert len(batches) == 5
    assert all(x.shape == (8, 8) and y.shape == (8,) for x, y in batches)
    assert torch.equal(batches[1][0][0], loader.dataset[8][0])


class StepTimer(pl.Callback):
    """Each step's wall time, and how much of it the training thread spent off the CPU."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.off_cpu: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.start, self.cpu = time.perf_counter(), time.thread_time()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.seconds.append(time.perf_counter() - self.start)
        self.off_cpu.append(self.seconds[-1] - (time.thread_time() - self.cpu))


def test_model_step_takes_at_least_step_s(quiet: dict) -> None:
    torch.manual_seed(0)
    model = KnownCostModel(step_s=0.02, features=4, lr=0.5)
    weights = model.net.weight.detach().clone()
    timer = StepTimer()
    trainer = pl.Trainer(max_steps=10, callbacks=[timer], **quiet)
    trainer.fit(model, known_cost_loader(n=200, batch_size=16, features=4))
    assert len(timer.seconds) == 10
    assert min(timer.seconds) >= 0.02
    if statistics.median(timer.off_cpu) > SLACK_S / 2:  # the busy-wait waited for a core
        pytest.skip("other work took the CPU: the steps measured the machine, not the model")
    assert statistics.median(timer.seconds) < 0.02 + SLACK_S
    assert isinstance(trainer.optimizers[0], torch.optim.SGD)
    assert not torch.equal(model.net.weight, weights)
    assert torch.isfinite(trainer.callback_metrics["train_loss"])
