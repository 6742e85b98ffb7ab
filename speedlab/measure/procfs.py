"""The kernel's counters of this process, its threads, its children and the cores, read for the
system sampler (``speedlab.measure.system``) at the least cost to the thread that trains.

A reading runs in a thread beside the training thread and needs the GIL it uses. Each system
call that frees the GIL hands it to the training thread and back, and an object the reading
touches comes from memory where the step's work has emptied the caches: so the files are opened
once and read again from their start (``Pinned``), through libc's ``pread`` called with the GIL
held (``ctypes.PyDLL``: a read of a small /proc file takes microseconds), /dev/shm's use from
libc's ``statvfs`` called the same way, and this process's own CPU from calls that keep the GIL
(``os.times``, a thread's CPU clock). Linux only; where
there is no /proc the sampler reads psutil.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
import time
from typing import Any

import psutil

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PRIVATE = (b"Private_Clean:", b"Private_Dirty:", b"Private_Hugetlb:")

CoreTimes = tuple[float, float, float | None]
"""One core's (all, idle, iowait) time so far, in one unit; iowait None where not reported."""


def _libc_pread() -> Any:
    """libc's ``pread`` through ``ctypes.PyDLL``, which keeps the GIL for the call; None where
    there is no such libc."""
    try:
        pread = ctypes.PyDLL(None, use_errno=True).pread
    except (AttributeError, OSError):
        return None
    pread.argtypes = (ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_long)
    pread.restype = ctypes.c_ssize_t
    return pread


_pread = _libc_pread() if sys.platform == "linux" else None


class _StatVfs(ctypes.Structure):
    """glibc's and musl's ``struct statvfs`` on a 64-bit Linux, its spare words included."""

    _fields_ = [
        *((name, ctypes.c_ulong) for name in ("bsize", "frsize", "blocks", "bfree", "bavail")),
        *((name, ctypes.c_ulong) for name in ("files", "ffree", "favail", "fsid", "flag")),
        ("namemax", ctypes.c_ulong),
        ("spare", ctypes.c_int * 6),
    ]


def _libc_statvfs() -> Any:
    """libc's ``statvfs`` through ``ctypes.PyDLL`` (the GIL kept), where the struct's layout is
    known: a 64-bit Linux; else None."""
    if sys.platform != "linux" or ctypes.sizeof(ctypes.c_void_p) != 8:
        return None
    try:
        statvfs = ctypes.PyDLL(None, use_errno=True).statvfs
    except (AttributeError, OSError):
        return None
    statvfs.argtypes = (ctypes.c_char_p, ctypes.POINTER(_StatVfs))
    statvfs.restype = ctypes.c_int
    return statvfs


_statvfs = _libc_statvfs()


def used_bytes(path: str) -> int | None:
    """Bytes in use on the file system at ``path``, as ``shutil.disk_usage(path).used``; None
    where there is no such path. Through libc with the GIL held where it can be: ``os.stat``
    and ``os.statvfs`` each free it, which hands it to the training thread and back."""
    if _statvfs is None:
        return shutil.disk_usage(path).used if os.path.isdir(path) else None
    fs = _StatVfs()
    if _statvfs(os.fsencode(path), ctypes.byref(fs)) != 0:
        return None
    return (fs.blocks - fs.bfree) * fs.frsize


class Pinned:
    """A /proc file kept open and read again from its start, the GIL held."""

    def __init__(self, path: str, size: int = 4096) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._buffer = ctypes.create_string_buffer(size)

    def read(self) -> bytes:
        if _pread is None:
            return os.pread(self._fd, len(self._buffer), 0)
        count = _pread(self._fd, self._buffer, len(self._buffer), 0)
        if count < 0:
            raise OSError(ctypes.get_errno(), "pread of a /proc file failed")
        return ctypes.string_at(self._buffer, count)

    def close(self) -> None:
        os.close(self._fd)


def pinned(path: str, size: int = 4096) -> Pinned | None:
    """``Pinned(path)``, or None where there is no such file."""
    try:
        return Pinned(path, size)
    except OSError:
        return None


def close_all(*files: Pinned | None) -> None:
    for file in files:
        if file is not None:
            file.close()


class ChildFiles:
    """A child process's /proc files, kept open: its CPU and memory, and its main thread's
    children (a worker's own processes; None where the kernel does not list them)."""

    def __init__(self, pid: int) -> None:
        self._stat = Pinned(f"/proc/{pid}/stat")
        try:
            self._statm = Pinned(f"/proc/{pid}/statm")
        except OSError:
            self._stat.close()
            raise
        self.children = pinned(f"/proc/{pid}/task/{pid}/children")

    def usage(self) -> tuple[float, int]:
        """The child's CPU seconds (user + system) and resident bytes."""
        fields = self._stat.read().rsplit(b")", 1)[1].split()  # after the name: field 3 on
        cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime: 14 and 15
        return cpu_s, resident_bytes(self._statm)

    def close(self) -> None:
        close_all(self._stat, self._statm, self.children)


def resident_bytes(statm: Pinned) -> int:
    """The resident bytes in a process's /proc/PID/statm."""
    return int(statm.read().split()[1]) * PAGE_BYTES


def pids_in(children: Pinned) -> list[int]:
    """The processes listed in a thread's /proc children file."""
    return [int(pid) for pid in children.read().split()]


def thread_clock(ident: int) -> int | None:
    """The CPU clock of the thread ``ident`` (``threading.get_ident()``, which must be alive),
    read by ``time.clock_gettime`` from any thread; None where the OS has none (macOS)."""
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError):
        return None


def core_times(stat: Pinned | None) -> list[CoreTimes]:
    """Each core's times from /proc/stat where it is kept open, else from psutil. Guest time
    is inside user and nice already."""
    if stat is None:
        return [
            (sum(c) - getattr(c, "guest", 0) - getattr(c, "guest_nice", 0), c.idle, None)
            for c in psutil.cpu_times(percpu=True)
        ]
    cores: list[CoreTimes] = []
    for line in stat.read().splitlines()[1:]:
        if not line.startswith(b"cpu"):
            break
        ticks = [int(x) for x in line.split()[1:9]]  # user nice system idle iowait irq ... steal
        cores.append((float(sum(ticks)), float(ticks[3]), float(ticks[4])))
    return cores


def busy_iowait_total(before: CoreTimes, after: CoreTimes) -> tuple[float, float, float]:
    """Busy, iowait and total time of one core between two ``core_times`` readings; iowait
    counts as idle, as in psutil."""
    total, idle = after[0] - before[0], after[1] - before[1]
    iowait = (after[2] or 0.0) - (before[2] or 0.0)
    return max(0.0, total - idle - iowait), max(0.0, iowait), total


def unique_bytes(pid: int) -> int | None:
    """The pages only this process maps (its unique set size), from /proc; None where
    unreadable.

    A forked worker shares the main process's pages until either writes them, so adding its
    RSS counts a large dataset or the model once per worker. Reading smaps_rollup walks the
    process's page tables, which the training process must not wait for: the sampler reads it
    within ``speedlab.measure.reading.PAGE_WALK_SHARE`` of the time, and frees the GIL for it.
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            lines = rollup.read().splitlines()
    except OSError:
        return None
    found = [int(line.split()[1]) * 1024 for line in lines if line.startswith(_PRIVATE)]
    return sum(found) if found else None
