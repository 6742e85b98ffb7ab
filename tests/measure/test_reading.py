"""One reading of the machine (``Reader``), against real worker processes and files."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import threading
from multiprocessing.synchronize import Event

import psutil
import pytest

from speedlab.measure.reading import Reader

FORK = multiprocessing.get_context("fork")


def hold_memory(nbytes: int, ready: Event, release: Event) -> None:
    block = b"x" * nbytes  # written, so the pages are resident
    ready.set()
    release.wait(30)
    assert len(block) == nbytes


def test_a_reading_opens_no_file_once_the_first_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system call that frees the GIL hands it to the training thread and back: a reading
    reads again the files it keeps open, a worker's too (a cgroup's usage file apart)."""
    ready, release = FORK.Event(), FORK.Event()
    worker = FORK.Process(target=hold_memory, args=(50 * 2**20, ready, release))
    reader = Reader(threading.get_ident())
    reader.read()
    worker.start()
    opened: list[str] = []
    try:
        assert ready.wait(30)
        reader.read()  # the first to see the worker
        real_open, real_io_open = os.open, io.open

        def os_open(path: str, *args: object, **kwargs: object) -> int:
            opened.append(str(path))
            return real_open(path, *args, **kwargs)

        def io_open(file: object, *args: object, **kwargs: object) -> object:
            opened.append(str(file))
            return real_io_open(file, *args, **kwargs)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr("builtins.open", io_open)
        sample = reader.read()
        monkeypatch.undo()
    finally:
        release.set()
        worker.join()
        reader.close()
    usage = str(reader.quota.usage) if reader.quota is not None else None
    assert [path for path in opened if path != usage] == []
    assert sample.workers == 1 and len(sample.cpu_percent_per_core) == psutil.cpu_count()
    assert sample.rss_bytes >= psutil.Process().memory_info().rss


@pytest.mark.parametrize("listed", [True, False])
def test_a_workers_files_are_closed_once_it_is_gone(listed: bool) -> None:
    """The files a reading keeps open for a worker are closed at the first reading after it
    ends: a fit whose loaders start workers each epoch leaves no descriptors behind. Also
    where the kernel lists no thread's children and psutil finds the workers (``listed``)."""

    def opened_for(pid: int) -> list[str]:
        paths = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        return [path for path in paths if path.startswith(f"/proc/{pid}/")]

    ready, release = FORK.Event(), FORK.Event()
    worker = FORK.Process(target=hold_memory, args=(2**20, ready, release))
    reader = Reader(threading.get_ident())
    reader._proc_children &= listed
    try:
        reader.read()
        worker.start()
        assert ready.wait(30)
        assert reader.read().workers == 1
        held = opened_for(worker.pid)
        release.set()
        worker.join()
        assert reader.read().workers == 0
        assert opened_for(worker.pid) == []
    finally:
        release.set()
        worker.join()
        reader.close()
    assert len(held) == 3  # its stat, statm and its main thread's children
