"""What it costs this machine to hand a batch from a DataLoader worker to the training process.

A worker's batch crosses processes: its tensors go to shared memory and the training process
receives a handle for each (on Linux a file descriptor, passed back and forth with the worker).
That wait is part of data_time with workers even when every batch is ready, and it ranges from
a fraction of a millisecond on a quiet machine to several on a small shared VM, so speedlab's
prediction (speedlab.analysis.predict) measures it here rather than assume it. On a shared VM
it also moves with the host's load: on 2026-12-02 one idle 2-core VM read 1.2 to 1.8 ms, then
4 to 8 ms three minutes later, then 2 ms, so a reading stands for its moment only and every
run takes its own.
"""

from __future__ import annotations

import multiprocessing
import statistics
import time

from speedlab.measure.machine import start_method

BATCHES = 16
"""Ready batches taken to measure the hand-over (after one that starts the worker)."""
_AHEAD = 0.05  # seconds the worker gets to fill its queue before the timing starts
_BETWEEN = 0.005  # seconds between takes, so the worker's queue stays full


class _Pairs:
    """Batches of an input and a target, as most training batches are (a map-style dataset:
    a length and numbered items)."""

    def __len__(self) -> int:
        return BATCHES + 1

    def __getitem__(self, index: int) -> tuple:
        import torch

        return torch.zeros(64, 8), torch.zeros(64, dtype=torch.long)


def handover_time() -> float:
    """Seconds the training process waits to take one ready batch of two tensors from a
    worker: the median of ``BATCHES`` takes from a real one-worker DataLoader whose queue is
    full. Measured anew at each call (about 0.2 s, never while a fit trains); it leaves
    torch's random numbers and the process's start method as they were."""
    import torch
    from torch.utils.data import DataLoader

    loader = DataLoader(
        _Pairs(),
        batch_size=None,
        num_workers=1,
        prefetch_factor=BATCHES + 1,
        generator=torch.Generator(),  # its workers' seed, not drawn from torch's global one
        multiprocessing_context=multiprocessing.get_context(start_method()),
    )
    batches = iter(loader)
    try:
        next(batches)
        time.sleep(_AHEAD)
        takes = []
        for _ in range(BATCHES):
            start = time.perf_counter()
            next(batches)
            takes.append(time.perf_counter() - start)
            time.sleep(_BETWEEN)
    finally:
        del batches  # shuts the worker down
    return statistics.median(takes)
