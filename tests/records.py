"""Step records and system samples of known figures, for the tests of what reads them."""

from __future__ import annotations

from speedlab.measure.system import SystemSample
from speedlab.results.run import RunResult, empty_records


def records_of(steps: int, data_s: float = 0.002, batch_s: float = 0.008, samples: int = 8) -> dict:
    records = empty_records()
    for i in range(steps):
        records["t"].append(i * (data_s + batch_s))
        records["data_time"].append(data_s)
        records["batch_time"].append(batch_s)
        records["wall"].append(data_s + batch_s)
        records["samples"].append(samples)
        records["phase"].append("warmup" if i < 5 else "steady")
        records["epoch"].append(0)
    return records


def sample(cpu: float | None, rss: int, workers: int) -> SystemSample:
    return SystemSample(
        t=0.0,
        cpu_percent=cpu,
        cpu_percent_per_core=None,
        iowait_percent=None,
        main_cpu_percent=None,
        workers_cpu_percent=None,
        rss_bytes=rss,
        workers=workers,
        shm_used_bytes=None,
        torch_threads=None,
        gpu_util_percent=None,
        gpu_mem_bytes=None,
    )


def run_of(
    data: list[float],
    batch: list[float],
    *,
    knobs: dict | None = None,
    warmup: int = 1,
    samples: int = 10,
) -> RunResult:
    """A run of these per-step data and batch times, the first ``warmup`` steps warm-up."""
    records = empty_records()
    for i, (d, b) in enumerate(zip(data, batch)):
        records["t"].append(float(i))
        records["data_time"].append(d)
        records["batch_time"].append(b)
        records["wall"].append(d + b)
        records["samples"].append(samples)
        records["phase"].append("warmup" if i < warmup else "steady")
        records["epoch"].append(0)
    return RunResult(knobs=knobs or {}, records=records)
