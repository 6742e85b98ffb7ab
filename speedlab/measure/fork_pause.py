"""speedlab's own threads pause around a fork: none is at work, or holds a lock, when a
DataLoader worker or a rank is forked.

A forked child gets a copy of every lock as it was at the fork, and none of the parent's other
threads. A lock that the system sampler held mid-read, or that a live view held while writing to
the terminal, would stay held in the child for ever, and the child would hang where it needs it.
Each of speedlab's threads does its work inside a ``ForkPause`` and waits between works holding
nothing; before a fork the forking thread takes every work lock, so the fork falls between
works, and gives the locks back after it.
"""

from __future__ import annotations

import os
import threading
import weakref
from types import TracebackType

FORK_WAIT_S = 5.0
"""Longest a fork waits for one thread's work to end: after that it goes ahead, as it would
without speedlab (a work that long is a bug of its own)."""

_pauses: weakref.WeakSet[ForkPause] = weakref.WeakSet()
_held = threading.local()  # the pauses each forking thread took: two may fork at once


class ForkPause:
    """The work lock of one of speedlab's threads: ``with pause:`` around each unit of work.

    Example::

        pause = ForkPause()
        while not stopped.wait(interval):
            with pause:
                sample()
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        _pauses.add(self)

    def __enter__(self) -> ForkPause:
        self._lock.acquire()
        return self

    def enter_if_free(self) -> bool:
        """Enter without waiting: False where another work, or a fork, holds the pause.
        ``leave()`` after a True."""
        return self._lock.acquire(blocking=False)

    def leave(self) -> None:
        self._lock.release()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave()


def _before_fork() -> None:
    _held.pauses = [p for p in list(_pauses) if p._lock.acquire(timeout=FORK_WAIT_S)]


def _after_fork() -> None:
    held, _held.pauses = getattr(_held, "pauses", []), []
    for pause in reversed(held):
        pause._lock.release()


if hasattr(os, "register_at_fork"):  # POSIX; Windows has no fork
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork, after_in_child=_after_fork
    )
