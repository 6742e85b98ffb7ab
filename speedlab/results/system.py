"""What the machine did while a run trained: the sampled figures a run carries.

The sampler that takes them is speedlab.measure.system; a run that was not sampled carries an
empty summary (``SystemSummary()``), whose figures are None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from speedlab.results.codec import Record


@dataclass(frozen=True)
class SystemSummary(Record):
    """A run's system figures: CPU means are time-weighted over the sampled intervals.

    Process CPU figures are in percent of one core (100 = one core fully busy); machine figures
    in percent of all cores.
    """

    cores: int | None = None
    samples: int = 0
    duration_s: float = 0.0
    cpu_percent: float | None = None
    cpu_percent_per_core: list[float] = field(default_factory=list)
    iowait_percent: float | None = None  # None where the OS does not report iowait
    main_cpu_percent: float | None = None
    workers_cpu_percent: float | None = None  # all child processes together
    peak_workers: int = 0
    peak_rss_bytes: int | None = None  # each page once: the main process's RSS plus workers'
    peak_shm_bytes: int | None = None
    torch_threads: int | None = None
    gpu_util_percent: float | None = None  # None without a GPU
    gpu_mem_peak_bytes: int | None = None
    train_thread_cpu_percent: float | None = None  # None where the OS does not report it
    # Set where the workers' own pages could not be read and their whole RSS was added, so
    # pages they share with the main process count more than once
    memory_note: str | None = None
    # The cgroup's CPU quota (a container's limit) in cores, None without one; and the CPU every
    # process under it used, in percent of one core (None where it could not be read)
    cpu_quota_cores: float | None = None
    cgroup_cpu_percent: float | None = None
    # Whole cores the run's process could use (its affinity and quota) where it ran; None in a
    # record made before this was kept. A run read on another machine keeps its own.
    usable_cores: int | None = None

    @property
    def sampled(self) -> bool:
        return self.samples > 0
