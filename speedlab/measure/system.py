"""What the machine does while a model trains: CPU, memory, /dev/shm and GPU, sampled in rhythm.

`SystemSampler` watches the main process and the children born during the run (DataLoader
workers), four times a second as a run starts and once a second after (``SLOW_AFTER_S``), so
the doctor can tell a CPU-bound input pipeline from an I/O-bound one. Under a cgroup's CPU
quota (a container) it also reads the CPU every process under the quota used
(speedlab.measure.cgroup), so other processes sharing the quota can be told apart. A reading
is ``speedlab.measure.reading``; the machine's static description is speedlab.measure.machine.
"""

from __future__ import annotations

import math
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from statistics import fmean

import psutil

from speedlab.measure.fork_pause import ForkPause
from speedlab.measure.machine import usable_cores
from speedlab.measure.reading import Reader, SystemSample
from speedlab.results.system import SystemSummary

SLOW_AFTER_S = 4.0
"""Seconds of a run sampled every ``interval_s``, then every ``SLOW_INTERVAL_S`` at most: on 2
busy cores a reading's 66 us of Python (idle) cost the fit 0.4 ms taken between its steps, and
the steps it fell in 0.7 ms taken beside them (2026-12-01, ``benchmarks/probe_overhead.py``).
Short runs keep the fine rhythm; long ones show means."""
SLOW_INTERVAL_S = 1.0
LATE_SHARE = 0.5
"""How late, in intervals, the sampler's thread lets a reading be before it takes it itself,
once the thread that trains takes them (``SystemSampler.read_if_due``): until then it is left
to that thread. Before, it takes each reading on time."""


class SystemSampler:
    """Samples the machine until stopped: the thread that trains takes a due reading between
    two steps (``read_if_due``), a daemon thread takes those it leaves.

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
        self._due = math.inf  # when the next reading is due (``time.perf_counter()``)
        self._path_due = [math.inf]  # the same for a training path (``path_due``)
        self._started = 0.0
        self._path_reads = True  # until a reading on the training path fails
        self._late = 0.0  # LATE_SHARE, once a training path takes the readings
        self._samples: list[SystemSample] = []
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._fork_pause = ForkPause()  # held by whichever thread reads
        self._thread: threading.Thread | None = None
        self._reader: Reader | None = None
        self._final: SystemSummary | None = None

    def start(self) -> None:
        """Take the first sample and start the sampling thread. A sampler runs once."""
        if self._reader is not None:
            raise RuntimeError("SystemSampler.start() was already called; use a new sampler")
        self._reader = Reader(threading.get_ident())
        self._started = self._due = time.perf_counter()
        self._read(self._reader, walk=True)
        self._thread = threading.Thread(
            target=self._loop, args=(self._reader,), name="speedlab-system-sampler", daemon=True
        )
        self._thread.start()

    def path_due(self) -> list[float]:
        """When the next reading is due (``time.perf_counter()``), for a training path that
        from now on takes the due readings between its steps (``read_if_due``): a list, which
        it reads without a call; inf where it is to take none. The sampler's thread leaves each
        due reading to it for ``LATE_SHARE`` of an interval."""
        self._late = LATE_SHARE
        return self._path_due

    def read_if_due(self) -> None:
        """Take the due reading now, on the calling thread: the thread that trains calls it
        between two steps (``path_due``), after the step's end stamp and before the next
        one's fetch: there a reading costs the fit its own time (0.4 ms on 2 busy cores), in
        a step's wall but in neither its data_time nor its batch_time. Taken beside the steps,
        it took the GIL or a core from the step it fell in, which cost that step about 0.7 ms
        (2026-12-01). The workers' page walks stay with the sampler's thread
        (``PAGE_WALK_SHARE``), as do the readings no step comes to take within ``LATE_SHARE``
        of an interval (a long step, a stall)."""
        if self._reader is None or not self._fork_pause.enter_if_free():
            return  # the sampler's thread is reading, or a fork is under way
        try:
            if self._final is None and time.perf_counter() >= self._due:
                self._read(self._reader, walk=False)
        except Exception as error:  # not the fit's to end: the sampler's thread reads on
            self._path_reads, self._late, self._path_due[0] = False, 0.0, math.inf
            warnings.warn(
                f"speedlab: a system reading failed between two steps ({error!r}); "
                "the sampler's own thread takes the readings from now on",
                RuntimeWarning,
                stacklevel=2,
            )
        finally:
            self._fork_pause.leave()

    def stop(self) -> SystemSummary:
        """Stop and join the thread, take a final sample, return the summary. Idempotent."""
        if self._final is None:
            if self._reader is None or self._thread is None:
                raise RuntimeError("SystemSampler.stop() called before start()")
            self._stop_event.set()
            self._thread.join()
            try:
                with self._fork_pause:
                    self._path_due[0] = math.inf
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

    def _interval(self) -> float:
        if self._due - self._started < SLOW_AFTER_S:
            return self.interval_s
        return max(self.interval_s, SLOW_INTERVAL_S)

    def _read(self, reader: Reader, walk: bool) -> None:
        """Take a reading and set the next one's time, in the rhythm; after a late reading
        from now, instead of catching up in a burst. Inside the fork pause."""
        sample = reader.read(walk=walk)
        self._add(sample)
        self._due = max(self._due + self._interval(), sample.t)
        self._path_due[0] = self._due if self._path_reads else math.inf

    def _loop(self, reader: Reader) -> None:
        while not self._stop_event.wait(
            max(0.0, self._due + self._late * self._interval() - time.perf_counter())
        ):
            with self._fork_pause:
                if time.perf_counter() >= self._due:  # no step came to take it
                    self._read(reader, walk=True)
                else:
                    reader.walk()


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
