"""speedlab.measure.fork_pause: a fork never falls inside the work of one of speedlab's threads."""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable

import pytest

from speedlab.measure.fork_pause import ForkPause
from speedlab.measure.reading import Reader, SystemSample
from speedlab.measure.system import SystemSampler

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")

FORKS = 40


def forks_inside(busy: Callable[[], bool]) -> int:
    """Fork ``FORKS`` times; how many children found ``busy()`` true (a thread mid-work)."""
    inside = 0
    with warnings.catch_warnings():  # 3.12+: "multi-threaded, use of fork() may deadlock"
        warnings.simplefilter("ignore", DeprecationWarning)
        for _ in range(FORKS):
            pid = os.fork()
            if pid == 0:
                os._exit(1 if busy() else 0)
            _, status = os.waitpid(pid, 0)
            inside += os.waitstatus_to_exitcode(status)
            time.sleep(0.001)
    return inside


def test_a_fork_waits_for_the_work_in_hand_and_the_thread_goes_on_after() -> None:
    pause, stop, state = ForkPause(), threading.Event(), {"working": False, "works": 0}

    def loop() -> None:  # at work nearly all the time: 2 ms works, back to back
        while not stop.is_set():
            with pause:
                state["working"] = True
                time.sleep(0.002)
                state["working"] = False
                state["works"] += 1

    thread = threading.Thread(target=loop, name="speedlab-test-worker")
    thread.start()
    try:
        assert forks_inside(lambda: state["working"]) == 0
        before = state["works"]
        time.sleep(0.05)
        assert state["works"] > before  # the thread was given its lock back
    finally:
        stop.set()
        thread.join()


def test_no_fork_falls_inside_a_system_sample(monkeypatch: pytest.MonkeyPatch) -> None:
    reading, readers = threading.Event(), set()
    read = Reader.read

    def slow_read(self: Reader, every_worker: bool = False, walk: bool = True) -> SystemSample:
        readers.add(threading.current_thread().name)
        reading.set()
        try:
            time.sleep(0.002)
            return read(self, every_worker, walk)
        finally:
            reading.clear()

    monkeypatch.setattr(Reader, "read", slow_read)
    with SystemSampler(interval_s=0.0005):
        inside = forks_inside(reading.is_set)
        # Once in a run of the measure tests after the notebook tests (2026-12-01), 1 fork of 40;
        # never alone. Which threads read, and which were alive, tell the next one apart.
        alive = sorted(t.name for t in threading.enumerate())
        assert inside == 0, f"readers {sorted(readers)}, threads alive {alive}"
