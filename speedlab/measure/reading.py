"""One reading of what the machine does while a model trains: CPU, memory, /dev/shm and GPU
(``Reader``), at the least cost to the thread that trains. ``speedlab.measure.system`` takes
readings in rhythm and sums them up.

Nothing here imports torch or lightning: torch is only consulted when the user's code has
already imported it, and CUDA is never initialised (that would break fork-based workers).
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import Any

import psutil

from speedlab.measure.cgroup import cpu_quota
from speedlab.measure.devices import memory_reserved
from speedlab.measure.machine import SHM_PATH, Nvml, imported_torch
from speedlab.measure.procfs import (
    ChildFiles,
    CoreTimes,
    Pinned,
    busy_iowait_total,
    close_all,
    core_times,
    pids_in,
    pinned,
    resident_bytes,
    thread_clock,
    unique_bytes,
    used_bytes,
)

_CPU_FIGURES = (
    "cpu_percent",
    "cpu_percent_per_core",
    "iowait_percent",
    "main_cpu_percent",
    "workers_cpu_percent",
)


@dataclass(frozen=True)
class SystemSample:
    """One reading. CPU figures cover the interval since the previous sample (None on the first).

    Process CPU figures are in "percent of one core" (100 = one core fully busy), like
    `psutil.Process.cpu_percent`; machine figures are in percent of all cores.
    """

    t: float  # time.perf_counter()
    cpu_percent: float | None
    cpu_percent_per_core: list[float] | None
    iowait_percent: float | None  # None where the OS does not report iowait
    main_cpu_percent: float | None
    workers_cpu_percent: float | None  # all child processes together
    rss_bytes: int  # main process plus its workers, each page once (see ``Reader.read``)
    workers: int  # child processes alive
    shm_used_bytes: int | None
    torch_threads: int | None  # None unless torch is imported
    gpu_util_percent: float | None  # mean over the visible GPUs (NVML)
    gpu_mem_bytes: int | None  # device memory in use (NVML), else torch's reserved bytes
    # The thread that started the sampler (the one that trains), where the OS reports it
    train_thread_cpu_percent: float | None = None
    workers_rss_counted: bool = False  # a worker's whole RSS was added (see ``unique_bytes``)
    # Every process under the cgroup's CPU quota (this one, its workers and any other), in
    # percent of one core; None without a quota or where its CPU counter cannot be read
    cgroup_cpu_percent: float | None = None


PAGE_WALK_SHARE = 0.01
"""The most of the time the sampler spends reading workers' own pages while a fit trains.
Reading a process's smaps_rollup walks its page tables in the kernel, about 13 ms for a worker
forked from a 350 MB training process on a small VM and more as the memory grows, holding the
worker's memory map for that long: read for every worker at every sample, it slowed a cell
with 3 workers on 2 cores by 18% (benchmarks/workers_overhead.py). So one worker is read at a
time, the one read longest ago, and the next reading waits until the walks are this share of
the time; the reading after training reads every worker."""


class Reader:
    """Takes samples; keeps the previous readings that per-interval CPU deltas need.

    CPU deltas are computed here rather than with `psutil.cpu_percent(interval=None)`,
    whose "since the last call" state is global and shared with any other caller.

    A reading runs on the thread that trains, or beside it and takes the GIL from it: its
    figures come from files kept open and calls that keep the GIL (``speedlab.measure.procfs``),
    and of this process's threads only its Python threads' children are read. The workers' page
    walks free the GIL and take milliseconds: they are for the sampler's own thread.
    """

    def __init__(self, train_thread: int) -> None:
        self._main = psutil.Process(os.getpid())
        self._thread_clock = thread_clock(train_thread)
        self._thread_cpu: float | None = None
        self.quota = cpu_quota()
        self._cgroup_cpu: float | None = None
        self._nvml = Nvml()
        usage = self.quota.usage if self.quota is not None else None
        self._quota_usage = pinned(str(usage)) if usage is not None else None
        self._stat = pinned("/proc/stat", 1 << 16)
        self._statm = pinned("/proc/self/statm")
        self._t: float | None = None
        self._cpu: list[CoreTimes] = []
        self._main_cpu = 0.0
        self._reaped_cpu = 0.0
        # Keyed by psutil.Process, which hashes on (pid, create time): a reused pid is a new key.
        self._children_cpu: dict[psutil.Process, float] = {}
        self._known: dict[int, psutil.Process] = {}
        # a Python thread's native id -> its children file, where the kernel lists children
        self._children_files: dict[int, Pinned] = {}
        self._proc_children = os.path.exists(
            f"/proc/self/task/{threading.get_native_id()}/children"
        )
        self._files: dict[psutil.Process, ChildFiles] = {}
        # Children alive before the first reading (a kernel's helpers, another loader's
        # persistent workers) are not this run's workers: they are left out of every figure.
        self._before: set[psutil.Process] | None = None
        self._before_cpu: dict[psutil.Process, float] = {}
        self._before_reaped_cpu = 0.0
        # Each worker's own bytes as last read (None: unreadable), the longest unread first.
        self._own: dict[psutil.Process, int | None] = {}
        self._walk_due = 0.0
        self._workers: list[psutil.Process] = []  # this run's, at the last reading

    def _own_children(self) -> list[int]:
        """This process's children, from its Python threads' children files: a DataLoader's
        workers are forked by the thread that iterates it, and the children of a thread that
        ends pass to the main thread. Torch's own threads fork nothing."""
        alive = {thread.native_id for thread in threading.enumerate()}
        for ended in self._children_files.keys() - alive:
            self._children_files.pop(ended).close()
        pids: list[int] = []
        for tid in alive:
            if tid not in self._children_files:
                if (opened := pinned(f"/proc/self/task/{tid}/children")) is None:
                    continue
                self._children_files[tid] = opened
            with suppress(OSError):  # the thread ended meanwhile
                pids += pids_in(self._children_files[tid])
        return pids

    def _descendants(self) -> list[psutil.Process]:
        """The main process's descendants (DataLoader workers and their children).

        Where the kernel lists each thread's children (/proc/PID/task/TID/children) that takes
        a few small reads of files kept open (of a child, its main thread's: a worker's own
        processes); psutil's ``children()`` scans every process on the machine, which at 4 Hz
        would cost the training process measurable time.
        """
        if not self._proc_children:
            return self._main.children(recursive=True)
        found: dict[int, psutil.Process] = {}
        todo = self._own_children()
        while todo:
            pid = todo.pop()
            if pid not in found:
                with suppress(psutil.Error, OSError):  # it ended meanwhile
                    child = self._known.get(pid) or psutil.Process(pid)
                    children = self._files_of(child).children
                    found[pid] = child
                    todo += pids_in(children) if children else ()
        self._known = found
        return list(found.values())

    def _files_of(self, child: psutil.Process) -> ChildFiles:
        if (files := self._files.get(child)) is None:
            files = self._files[child] = ChildFiles(child.pid)
        return files

    def _usage(self, child: psutil.Process) -> tuple[float, int]:
        """A child's CPU seconds and resident bytes: from its /proc files, kept open, where
        this process's are, else from psutil."""
        if self._stat is None:
            with child.oneshot():
                times = child.cpu_times()
                return times.user + times.system, child.memory_info().rss
        return self._files_of(child).usage()

    def _cgroup_used_s(self) -> float | None:
        if self.quota is None:
            return None
        if self._quota_usage is None:
            return self.quota.used_s()
        try:
            return self.quota.used_s(self._quota_usage.read().decode())
        except OSError:
            return None

    def _rss(self) -> int:
        if self._statm is None:
            return self._main.memory_info().rss
        return resident_bytes(self._statm)

    def read(self, every_worker: bool = False, walk: bool = True) -> SystemSample:
        """A sample of now; ``every_worker``: each worker's own pages read afresh, whatever
        their budget (the reading after training); ``walk=False``: none (``walk``)."""
        t = time.perf_counter()
        cpu = core_times(self._stat)
        cgroup_cpu = self._cgroup_used_s()
        main_times = os.times()
        main_cpu = main_times.user + main_times.system
        thread_cpu = None
        if self._thread_clock is not None:
            with suppress(OSError):  # the thread has ended
                thread_cpu = time.clock_gettime(self._thread_clock)
        # CPU time of children that have exited and been waited for lands here.
        reaped_cpu = main_times.children_user + main_times.children_system
        # Pages a worker shares with the main process are in the main process's RSS already.
        rss = self._rss()
        rss_counted = False
        children_cpu: dict[psutil.Process, float] = {}
        before_cpu: dict[psutil.Process, float] = {}
        descendants = self._descendants()
        for gone in self._files.keys() - set(descendants):
            self._files.pop(gone).close()
        if self._before is None:
            self._before = set(descendants)
        self._workers = [c for c in descendants if c not in self._before]
        if walk or every_worker:
            self._walk(self._workers, every_worker)
        for child in descendants:
            try:
                child_cpu, child_rss = self._usage(child)
            except (psutil.Error, OSError):
                continue
            if child not in self._before:
                own = self._own.get(child, 0)
                rss += child_rss if own is None else own
                rss_counted |= own is None
            owner = before_cpu if child in self._before else children_cpu
            owner[child] = child_cpu
        # An older child, once reaped, adds its CPU time to reaped_cpu: not this run's.
        self._before_reaped_cpu += sum(
            c for p, c in self._before_cpu.items() if p not in before_cpu
        )
        reaped_cpu -= self._before_reaped_cpu
        dt = t - self._t if self._t is not None and t > self._t else None
        gpu_util, gpu_mem = self._nvml.read()
        torch = imported_torch()
        sample = SystemSample(
            t=t,
            **self._cpu_figures(dt, cpu, main_cpu, reaped_cpu, children_cpu),
            rss_bytes=rss,
            workers=len(children_cpu),
            shm_used_bytes=used_bytes(SHM_PATH),
            torch_threads=torch.get_num_threads() if torch is not None else None,
            gpu_util_percent=gpu_util,
            gpu_mem_bytes=gpu_mem if gpu_mem is not None else memory_reserved(),
            train_thread_cpu_percent=_rate(thread_cpu, self._thread_cpu, dt),
            workers_rss_counted=rss_counted,
            cgroup_cpu_percent=_rate(cgroup_cpu, self._cgroup_cpu, dt),
        )
        self._t, self._cpu, self._main_cpu = t, cpu, main_cpu
        self._thread_cpu, self._cgroup_cpu = thread_cpu, cgroup_cpu
        self._before_cpu = before_cpu
        self._reaped_cpu, self._children_cpu = reaped_cpu, children_cpu
        return sample

    def _cpu_figures(
        self,
        dt: float | None,
        cpu: list[CoreTimes],
        main_cpu: float,
        reaped_cpu: float,
        children_cpu: dict[psutil.Process, float],
    ) -> dict[str, Any]:
        """The CPU figures of the interval `dt` since the previous reading (None: the first)."""
        if dt is None:
            return dict.fromkeys(_CPU_FIGURES)
        # A child first seen now was born since the previous reading: all its CPU time is new.
        live = sum(c - self._children_cpu.get(p, 0.0) for p, c in children_cpu.items())
        gone_seen = sum(c for p, c in self._children_cpu.items() if p not in children_cpu)
        # Reaped children's totals appear in reaped_cpu; what we had already counted is removed.
        unseen = max(0.0, reaped_cpu - self._reaped_cpu - gone_seen)
        cores = [busy_iowait_total(b, a) for b, a in zip(self._cpu, cpu, strict=False)]
        total = sum(c[2] for c in cores)
        has_iowait = bool(cpu) and cpu[0][2] is not None
        return {
            "cpu_percent": _percent(sum(c[0] for c in cores), total),
            "cpu_percent_per_core": [_percent(busy, tot) for busy, _, tot in cores],
            "iowait_percent": _percent(sum(c[1] for c in cores), total) if has_iowait else None,
            "main_cpu_percent": 100.0 * max(0.0, main_cpu - self._main_cpu) / dt,
            "workers_cpu_percent": 100.0 * max(0.0, live + unseen) / dt,
        }

    def walk(self) -> None:
        """Read the own pages of one of the last reading's workers, where due (``_walk``)."""
        self._walk(self._workers, every_worker=False)

    def _walk(self, workers: list[psutil.Process], every_worker: bool) -> None:
        """Read the own pages of the worker read longest ago (one never read first), where
        the walks so far keep within ``PAGE_WALK_SHARE`` of the time; of each one when
        ``every_worker``. Until its first reading a worker counts no pages of its own: forked,
        it starts out sharing all of them."""
        alive = set(workers)
        self._own = {w: own for w, own in self._own.items() if w in alive}
        stalest = [w for w in workers if w not in self._own] + list(self._own)
        if not every_worker:
            if time.perf_counter() < self._walk_due:
                return
            stalest = stalest[:1]
        for worker in stalest:
            start = time.perf_counter()
            own = unique_bytes(worker.pid)
            self._walk_due = start + (time.perf_counter() - start) / PAGE_WALK_SHARE
            self._own.pop(worker, None)
            self._own[worker] = own  # last in the order: read most recently

    def close(self) -> None:
        self._nvml.close()
        close_all(self._stat, self._statm, self._quota_usage, *self._children_files.values())
        for files in self._files.values():
            files.close()


def _rate(now: float | None, before: float | None, dt: float | None) -> float | None:
    """Percent of one core that a CPU clock read ``before`` and ``now``, ``dt`` apart, ran."""
    if now is None or before is None or dt is None:
        return None
    return 100.0 * max(0.0, now - before) / dt


def _percent(part: float, whole: float) -> float:
    return min(100.0, 100.0 * part / whole) if whole > 0 else 0.0
