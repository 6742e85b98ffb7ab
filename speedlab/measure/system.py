"""What the machine does while a model trains: CPU, memory, /dev/shm and GPU, sampled in a thread.

`SystemSampler` watches the main process and the children born during the run (DataLoader
workers), four times a second as a run starts and once a second after (``SLOW_AFTER_S``), so
the doctor can tell a CPU-bound input pipeline from an I/O-bound one. Under a cgroup's CPU quota (a container) it also reads the CPU every process under the
quota used (speedlab.measure.cgroup), so other processes sharing the quota can be told apart.
The machine's static description is speedlab.measure.machine.

Nothing here imports torch or lightning: torch is only consulted when the user's code has
already imported it, and CUDA is never initialised (that would break fork-based workers).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from itertools import pairwise
from statistics import fmean
from typing import Any

import psutil

from speedlab.measure.cgroup import cpu_quota
from speedlab.measure.devices import memory_reserved
from speedlab.measure.fork_pause import ForkPause
from speedlab.measure.machine import SHM_PATH, Nvml, imported_torch, usable_cores
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
from speedlab.results.system import SystemSummary

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
    rss_bytes: int  # main process plus its workers, each page once (see ``_Reader.read``)
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


SLOW_AFTER_S = 4.0
"""Seconds of a run sampled every ``interval_s``, then every ``SLOW_INTERVAL_S`` at most: on 2
cores a reading's 66 us of Python cost the steps it fell in about 0.7 ms (2026-12-01,
``benchmarks/probe_overhead.py``). Short runs keep the fine rhythm; long ones show means."""
SLOW_INTERVAL_S = 1.0


class SystemSampler:
    """Samples the machine in a daemon thread until stopped.

    Args:
        interval_s: seconds between samples for ``SLOW_AFTER_S``, then ``SLOW_INTERVAL_S`` at
            least; one at `start()` and at `stop()` too, so even a very short run has data.

    Example::

        with SystemSampler() as sampler:
            trainer.fit(model, loader)
        print(sampler.summary().workers_cpu_percent)
    """

    def __init__(self, interval_s: float = 0.25) -> None:
        if not interval_s > 0:
            raise ValueError(f"SystemSampler(interval_s={interval_s!r}): expected seconds > 0")
        self.interval_s = interval_s
        self._samples: list[SystemSample] = []
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._fork_pause = ForkPause()
        self._thread: threading.Thread | None = None
        self._reader: _Reader | None = None
        self._final: SystemSummary | None = None

    def start(self) -> None:
        """Take the first sample and start the sampling thread. A sampler runs once."""
        if self._reader is not None:
            raise RuntimeError("SystemSampler.start() was already called; use a new sampler")
        self._reader = _Reader(threading.get_ident())
        self._add(self._reader.read())
        self._thread = threading.Thread(
            target=self._loop, args=(self._reader,), name="speedlab-system-sampler", daemon=True
        )
        self._thread.start()

    def stop(self) -> SystemSummary:
        """Stop and join the thread, take a final sample, return the summary. Idempotent."""
        if self._final is None:
            if self._reader is None or self._thread is None:
                raise RuntimeError("SystemSampler.stop() called before start()")
            self._stop_event.set()
            self._thread.join()
            try:
                self._add(self._reader.read(every_worker=True))
            finally:
                self._reader.close()
            self._final = self.summary()
        return self._final

    def __enter__(self) -> SystemSampler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def samples(self) -> list[SystemSample]:
        """A copy of the samples taken so far, oldest first."""
        with self._lock:
            return list(self._samples)

    def latest(self) -> SystemSample | None:
        """The newest sample (for a live view), or None before `start()`."""
        with self._lock:
            return self._samples[-1] if self._samples else None

    def summary(self, since: float | None = None) -> SystemSummary:
        """Summary of the samples so far; after `stop()` it covers the whole run. ``since``
        (a ``time.perf_counter()``): its CPU figures cover only the time from then on, where
        the samples taken in it cover at least half of it (``summarize``)."""
        quota = self._reader.quota if self._reader is not None else None
        cores = psutil.cpu_count() or 1
        summary = summarize(self.samples, cores, quota.cores if quota else None, since)
        return replace(summary, usable_cores=usable_cores())

    def _add(self, sample: SystemSample) -> None:
        with self._lock:
            self._samples.append(sample)

    def _loop(self, reader: _Reader) -> None:
        started = time.perf_counter()
        slow = max(self.interval_s, SLOW_INTERVAL_S)
        due = started + self.interval_s
        while not self._stop_event.wait(max(0.0, due - time.perf_counter())):
            with self._fork_pause:
                self._add(reader.read())
            interval = self.interval_s if due - started < SLOW_AFTER_S else slow
            # After a slow read, resume the rhythm from now instead of catching up in a burst.
            due = max(due + interval, time.perf_counter())


def summarize(
    samples: list[SystemSample],
    cores: int,
    quota_cores: float | None = None,
    since: float | None = None,
) -> SystemSummary:
    """Summarise samples: CPU means weighted by interval length, the GPU's use as a mean,
    memory as peaks. ``quota_cores``: the cgroup's CPU quota the samples were taken under, if
    any. ``since``: the means cover only the intervals that start then or later, where those
    cover at least half the time from then to the last sample (a fit's steady steps: a
    one-time cost of its warm-up, such as a full garbage collection of 0.3 s, is in no step's
    figure and must not be in its CPU; a window shorter than two samples' interval is not
    covered, and then all the intervals are); the peaks cover every sample."""
    measured = [(a, b) for a, b in pairwise(samples) if b.cpu_percent is not None]
    later = [(a, b) for a, b in measured if since is not None and a.t >= since]
    if not later or 2 * sum(b.t - a.t for a, b in later) < samples[-1].t - (since or 0.0):
        later = measured
    timed = [(b.t - a.t, b) for a, b in later]
    span = sum(dt for dt, _ in timed)

    def weighted(get: Callable[[SystemSample], float]) -> float:
        return sum(dt * get(s) for dt, s in timed) / span if span > 0 else 0.0

    n_cores = min((len(s.cpu_percent_per_core or []) for _, s in timed), default=0)
    has_iowait = bool(timed) and all(s.iowait_percent is not None for _, s in timed)
    window = [b for _, b in later] or samples
    gpu_utils = [s.gpu_util_percent for s in window if s.gpu_util_percent is not None]
    gpu_mems = [s.gpu_mem_bytes for s in samples if s.gpu_mem_bytes is not None]
    shms = [s.shm_used_bytes for s in samples if s.shm_used_bytes is not None]
    threads = [s.torch_threads for s in samples if s.torch_threads is not None]
    has_thread = bool(timed) and all(s.train_thread_cpu_percent is not None for _, s in timed)
    has_cgroup = bool(timed) and all(s.cgroup_cpu_percent is not None for _, s in timed)
    return SystemSummary(
        cores=cores,
        samples=len(samples),
        duration_s=samples[-1].t - samples[0].t if samples else 0.0,
        cpu_percent=weighted(lambda s: s.cpu_percent or 0.0),
        cpu_percent_per_core=[
            weighted(lambda s, i=i: (s.cpu_percent_per_core or [])[i]) for i in range(n_cores)
        ],
        iowait_percent=weighted(lambda s: s.iowait_percent or 0.0) if has_iowait else None,
        main_cpu_percent=weighted(lambda s: s.main_cpu_percent or 0.0),
        workers_cpu_percent=weighted(lambda s: s.workers_cpu_percent or 0.0),
        peak_workers=max((s.workers for s in samples), default=0),
        peak_rss_bytes=max((s.rss_bytes for s in samples), default=0),
        peak_shm_bytes=max(shms) if shms else None,
        torch_threads=threads[-1] if threads else None,
        gpu_util_percent=fmean(gpu_utils) if gpu_utils else None,
        gpu_mem_peak_bytes=max(gpu_mems) if gpu_mems else None,
        train_thread_cpu_percent=(
            weighted(lambda s: s.train_thread_cpu_percent or 0.0) if has_thread else None
        ),
        memory_note=OVERCOUNTED if any(s.workers_rss_counted for s in samples) else None,
        cpu_quota_cores=quota_cores,
        cgroup_cpu_percent=(
            weighted(lambda s: s.cgroup_cpu_percent or 0.0) if has_cgroup else None
        ),
    )


OVERCOUNTED = (
    "memory adds each worker's whole RSS (its own pages could not be read here), so pages "
    "the workers share with the main process count once per worker"
)
PAGE_WALK_SHARE = 0.01
"""The most of the time the sampler spends reading workers' own pages while a fit trains.
Reading a process's smaps_rollup walks its page tables in the kernel, about 13 ms for a worker
forked from a 350 MB training process on a small VM and more as the memory grows, holding the
worker's memory map for that long: read for every worker at every sample, it slowed a cell
with 3 workers on 2 cores by 18% (benchmarks/workers_overhead.py). So one worker is read at a
time, the one read longest ago, and the next reading waits until the walks are this share of
the time; the reading after training reads every worker."""


class _Reader:
    """Takes samples; keeps the previous readings that per-interval CPU deltas need.

    CPU deltas are computed here rather than with `psutil.cpu_percent(interval=None)`,
    whose "since the last call" state is global and shared with any other caller.

    A reading runs beside the training thread and takes the GIL from it: its figures come from
    files kept open and calls that keep the GIL (``speedlab.measure.procfs``), and of this
    process's threads only its Python threads' children are read.
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

    def read(self, every_worker: bool = False) -> SystemSample:
        """A sample of now; ``every_worker``: each worker's own pages read afresh, whatever
        their budget (the reading after training)."""
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
        self._walk([c for c in descendants if c not in self._before], every_worker)
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
