"""Step records and system samples of known figures, for the tests of what reads them."""

from __future__ import annotations

from speedlab.measure.system import SystemSample
from speedlab.results.knobs import Knobs
from speedlab.results.run import RunResult, empty_records
from speedlab.results.system import SystemSummary


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


BATCH = 8  # samples a batch of ``baseline``'s steps


def baseline(
    data_s: float = 0.024,
    batch_s: float = 0.010,
    *,
    busy: float = 0.0,
    threads: int = 1,
    knobs: dict | None = None,
    handover: float = 0.0,
) -> RunResult:
    """A baseline of these step times on 2 quiet cores, its loader (in the main process)
    keeping ``busy`` of a core busy while it loads: the training thread's CPU says so; a ready
    batch from a worker takes ``handover`` on its machine."""
    step = data_s + batch_s
    thread = (batch_s + busy * data_s) / step * 100
    system = SystemSummary(
        cores=2,
        cpu_percent=thread / 2,
        main_cpu_percent=thread * threads,
        workers_cpu_percent=0.0,
        torch_threads=threads,
        train_thread_cpu_percent=thread,
    )
    return RunResult(
        knobs=Knobs(**(knobs or {"workers": 0})),
        records=records_of(40, data_s, batch_s, BATCH),
        system=system,
        workload={"handover": handover},
    )


def hand_over_runs() -> tuple[RunResult, RunResult]:
    """``baseline``'s split with its hand-over read at 1 ms as it ended, and a later run (2
    workers) whose reading was 4 ms: with 3 workers the loading hides, and the predicted
    data_time is the hand-over the prediction used."""
    later = RunResult(knobs=Knobs(workers=2), workload={"handover": 0.004})
    return baseline(handover=0.001), later
