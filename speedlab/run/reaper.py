"""The DataLoader worker processes a run started, ended where the run left them alive.

A worker is known by the iterator that started it, not by being a daemon process: a cell's
own daemon process (a producer, a server) is the cell's business and is left running.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

REAP_TIMEOUT_S = 5.0
"""How long a worker left alive gets to end by itself before it is killed."""


class WorkerReaper:
    """While active, note the worker processes of every multi-process DataLoader iterator
    started in the thread that entered it (torch's ``_MultiProcessingDataLoaderIter``; the
    run's own, not another cell's beside a panel's run); ``reap`` ends those still alive.

    Example::

        with WorkerReaper() as reaper:
            train_fn()
        notes = reaper.reap()
    """

    def __init__(self) -> None:
        self.workers: list[Any] = []
        self._patched: tuple[type, Any] | None = None

    def __enter__(self) -> WorkerReaper:
        from torch.utils.data import dataloader

        cls = dataloader._MultiProcessingDataLoaderIter
        original = cls.__dict__["__init__"]
        workers, run_thread = self.workers, threading.get_ident()

        @functools.wraps(original)
        def __init__(iterator: Any, *args: Any, **kwargs: Any) -> None:
            try:
                original(iterator, *args, **kwargs)
            finally:  # those started before an error too
                if threading.get_ident() == run_thread:
                    workers.extend(getattr(iterator, "_workers", ()))

        cls.__init__ = __init__
        self._patched = (cls, original)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._patched is not None:
            cls, original = self._patched
            cls.__init__ = original
            self._patched = None

    def reap(self) -> list[str]:
        """End the workers still alive, after ``REAP_TIMEOUT_S`` (for all of them) to end by
        themselves; a note for each that had to be killed."""
        notes = []
        deadline = time.monotonic() + REAP_TIMEOUT_S
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                worker.kill()
                worker.join()
                notes.append(
                    f"A worker process ({worker.name}) was still alive after the run and was "
                    "stopped."
                )
        self.workers.clear()
        return notes
