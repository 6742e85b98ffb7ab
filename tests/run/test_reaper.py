"""WorkerReaper: the workers of the DataLoaders iterated while it watched, and only those, are
ended if left alive (tests/run/test_sweep.py shows it around a real run, beside a cell's own
daemon process)."""

from __future__ import annotations

import threading
import time

from torch.utils.data import DataLoader, dataloader

from speedlab.run import reaper as reaper_module
from speedlab.run.reaper import WorkerReaper


def test_only_the_workers_started_while_watching_are_ended_and_torch_is_left_as_it_was(
    monkeypatch,
) -> None:
    monkeypatch.setattr(reaper_module, "REAP_TIMEOUT_S", 0.5)
    init = dataloader._MultiProcessingDataLoaderIter.__init__
    before = iter(DataLoader(list(range(8)), batch_size=2, num_workers=1))
    with WorkerReaper() as reaper:
        kept = iter(DataLoader(list(range(8)), batch_size=2, num_workers=2))
    assert dataloader._MultiProcessingDataLoaderIter.__init__ is init
    workers, elder = list(kept._workers), before._workers[0]
    start = time.monotonic()
    notes = reaper.reap()
    assert time.monotonic() - start < 0.9  # one wait of 0.5 s for both, not one each
    assert [w.is_alive() for w in workers] == [False, False] and len(notes) == 2
    assert elder.is_alive()
    before._shutdown_workers()
    kept._shutdown_workers()


def test_workers_another_thread_starts_meanwhile_are_not_the_runs(monkeypatch) -> None:
    """Another cell's loader, iterated while a panel's run trains in its own thread."""
    monkeypatch.setattr(reaper_module, "REAP_TIMEOUT_S", 0.2)
    other: list = []
    with WorkerReaper() as reaper:
        thread = threading.Thread(
            target=lambda: other.append(iter(DataLoader(list(range(8)), num_workers=1)))
        )
        thread.start()
        thread.join()
    assert reaper.reap() == [] and other[0]._workers[0].is_alive()
    assert next(other[0]).tolist() == [0]
    other[0]._shutdown_workers()
