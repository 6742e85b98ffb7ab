"""The kernel's counters read from /proc files kept open, against psutil's readings of the same."""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time

import psutil
import pytest

from speedlab.measure import procfs

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc is Linux's")
FORK = multiprocessing.get_context("fork")


def spin(cpu_s: float) -> None:
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def test_libcs_pread_and_statvfs_are_called_with_the_gil_held() -> None:
    """``ctypes.PyDLL``'s functions keep the GIL (a CDLL's would free it for every call)."""
    for call in (procfs._pread, procfs._statvfs):
        assert call is not None and call._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def test_a_file_systems_used_bytes_are_shutils() -> None:
    """Read through libc's statvfs: /dev/shm with 8 MiB written to it reads what
    ``shutil.disk_usage`` reads, the 8 MiB included; a missing path reads None."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    with tempfile.NamedTemporaryFile(dir="/dev/shm") as file:
        before = procfs.used_bytes("/dev/shm")
        file.write(b"x" * 8 * 2**20)
        file.flush()
        used, theirs = procfs.used_bytes("/dev/shm"), shutil.disk_usage("/dev/shm").used
    assert used == pytest.approx(theirs, abs=2**20)
    assert used - before == pytest.approx(8 * 2**20, abs=2**20)
    assert procfs.used_bytes("/no/such/path") is None


def test_a_kept_file_reads_afresh_from_its_start() -> None:
    statm = procfs.Pinned("/proc/self/statm")
    try:
        before = procfs.resident_bytes(statm)
        block = bytearray(64 * 2**20)  # zeroed, so its pages are resident
        after = procfs.resident_bytes(statm)
        assert after - before == pytest.approx(len(block), rel=0.1)
        assert after == pytest.approx(psutil.Process().memory_info().rss, rel=0.05)
    finally:
        statm.close()
    assert procfs.pinned("/proc/self/no-such-file") is None


def test_the_cores_read_from_proc_stat_agree_with_psutils() -> None:
    """Over one spin of 0.3 s, /proc/stat kept open and psutil read the same share of each
    core busy."""
    stat = procfs.Pinned("/proc/stat", 1 << 16)
    before, before_psutil = procfs.core_times(stat), procfs.core_times(None)
    spin(0.3)
    after, after_psutil = procfs.core_times(stat), procfs.core_times(None)
    stat.close()
    shares = [b[0] / b[2] for b in map(procfs.busy_iowait_total, before, after)]
    psutil_shares = [
        b[0] / b[2] for b in map(procfs.busy_iowait_total, before_psutil, after_psutil)
    ]
    assert len(shares) == len(psutil_shares) == psutil.cpu_count()
    assert shares == pytest.approx(psutil_shares, abs=0.05)
    assert max(shares) > 0.5  # the spin
    assert all(core[2] is not None for core in after) and after_psutil[0][2] is None


def test_a_childs_files_read_what_psutil_reads() -> None:
    ready, release = FORK.Event(), FORK.Event()
    child = FORK.Process(target=_spin_then_wait, args=(0.3, ready, release))
    child.start()
    try:
        assert ready.wait(30)
        files = procfs.ChildFiles(child.pid)
        cpu_s, rss = files.usage()
        process = psutil.Process(child.pid)
        times, memory = process.cpu_times(), process.memory_info()
        assert files.children is not None and procfs.pids_in(files.children) == []
        files.close()
    finally:
        release.set()
        child.join()
    assert cpu_s == pytest.approx(times.user + times.system, abs=0.02)
    assert cpu_s > 0.25
    assert rss == pytest.approx(memory.rss, rel=0.05)


def _spin_then_wait(cpu_s: float, ready: object, release: object) -> None:
    spin(cpu_s)
    ready.set()  # type: ignore[attr-defined]
    release.wait(30)  # type: ignore[attr-defined]


def test_a_threads_cpu_clock_reads_its_own_cpu_only() -> None:
    clock = procfs.thread_clock(threading.get_ident())
    assert clock is not None
    start, other = time.clock_gettime(clock), threading.Thread(target=spin, args=(0.2,))
    other.start()
    other.join()
    time.sleep(0.1)
    spin(0.1)
    assert time.clock_gettime(clock) - start == pytest.approx(0.1, abs=0.03)
