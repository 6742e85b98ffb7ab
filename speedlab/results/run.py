"""Result objects: one RunResult per training run, a SweepResult for a comparison of runs.

Headline figures are derived from the per-step records, steady-state steps only, so a stored
result re-read from the run store gives the same figures as the live one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from speedlab.results.stats import Summary, summarize
from speedlab.results.table import fmt

PHASES = ("setup", "preload", "compile", "epoch_start", "warmup", "steady", "validation")
RECORD_KEYS = ("t", "data_time", "batch_time", "wall", "samples", "phase", "epoch")
DEVICE_RECORD_KEYS = ("host_data_time", "copy_time")
"""Records of a run on an asynchronous device only (see ``RunResult``)."""
WORKERS_CPU_MIN_PERCENT = 1.0
"""CPU (percent of a core) the child processes must use before they count as DataLoader
workers when nothing else says how many workers there were."""
WINDOW_ROUNDS = 2
"""Rounds of the DataLoader workers (one batch from each) in each window of a run's throughput
spread (see ``RunResult.throughput_summary``)."""
MIN_WINDOWS = 5
"""Fewest windows a run's throughput spread is cut into: windows of fewer rounds (down to one)
when the run is short."""


def empty_records() -> dict[str, list]:
    return {key: [] for key in RECORD_KEYS}


@dataclass
class RunResult:
    """What one training run measured.

    ``records`` holds one entry per training step in parallel lists: ``t`` (seconds since the
    fit started, when the step began waiting for its batch), ``data_time``, ``batch_time``,
    ``wall`` (wall time of the whole step, validation excluded, so it also holds other
    callbacks and logging), ``samples``, ``phase`` and ``epoch``. Figures are medians over steps
    in the ``steady`` phase. On an asynchronous device (CUDA) the steps' edges come from the
    device's own timeline: data_time is the time the device sat idle for want of input,
    ``copy_time`` the host-to-device copy's part of it, and ``host_data_time`` the host's wait
    for the loader, which the device's work may hide. ``records["pipeline"]``, when present,
    holds the DataLoader workers' batch timestamps (``worker``, ``start``, ``end``, ``taken``; see speedlab.measure.pipeline).
    ``host_syncs``, on a GPU, counts the synchronizing CUDA operations of a few warm-up steps
    per source line (``{"steps": n, "lines": [{"file", "line", "count"}]}``; speedlab.measure.syncs).
    """

    knobs: dict[str, Any] = field(default_factory=dict)
    records: dict[str, list] = field(default_factory=empty_records)
    phases: dict[str, float] = field(default_factory=dict)
    system: dict[str, Any] = field(default_factory=dict)
    final_loss: float | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    wall_time: float = 0.0
    device: str = "cpu"
    workload: dict[str, Any] = field(default_factory=dict)
    speedup: float | None = None
    diagnosis: list[Any] = field(default_factory=list)
    ranks: list[dict[str, Any]] = field(default_factory=list)
    replicates: list[RunResult] = field(default_factory=list)
    host_syncs: dict[str, Any] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return len(self.records["data_time"])

    @property
    def samples(self) -> int:
        return int(sum(self.records["samples"]))

    def _steady(self) -> list[int]:
        return [i for i, phase in enumerate(self.records["phase"]) if phase == "steady"]

    def steady_total(self, key: str) -> float:
        """One per-step record (``"data_time"``, ``"wall"``, ...) summed over the steady steps."""
        values = self.records[key]
        return sum(values[i] for i in self._steady())

    def _summary(self, key: str) -> Summary:
        values = self.records[key]
        return summarize([values[i] for i in self._steady()])

    @property
    def data_summary(self) -> Summary:
        return self._summary("data_time")

    @property
    def batch_summary(self) -> Summary:
        return self._summary("batch_time")

    @property
    def data_time(self) -> float:
        return self.data_summary.median

    @property
    def batch_time(self) -> float:
        return self.batch_summary.median

    @property
    def host_data_time(self) -> float:
        """The host's wait for the loader (data_time itself where the two clocks are one)."""
        return self._summary(
            "host_data_time" if "host_data_time" in self.records else "data_time"
        ).median

    @property
    def copy_time(self) -> float | None:
        """The host-to-device copy's part of data_time, where the device's timeline shows it."""
        return self._summary("copy_time").median if "copy_time" in self.records else None

    @property
    def step_time(self) -> float:
        return self.data_time + self.batch_time

    @property
    def data_share(self) -> float:
        step = self.step_time
        return self.data_time / step if step > 0 else math.nan

    @property
    def samples_per_s(self) -> float:
        """Samples over the wall time of the steady-state steps."""
        if self.replicates:
            return summarize([r.samples_per_s for r in self.replicates]).median
        seconds = self.steady_total("wall")
        return self.steady_total("samples") / seconds if seconds > 0 else math.nan

    @property
    def throughput_summary(self) -> Summary:
        """Spread of samples/s across replicates (``--repeat``), or else over the single run's
        steady steps: step by step without DataLoader workers, and over windows of
        ``WINDOW_ROUNDS`` rounds of the workers with them (fewer rounds if the run has fewer
        than ``MIN_WINDOWS`` windows of those). Workers hand over batches in bursts (several
        ready at once, then a long wait), so one step's throughput says little on its own.
        The batches go to the workers in turn, so a window of whole rounds holds as many
        batches of each worker, and a slow worker weighs the same in every window."""
        if self.replicates:
            return summarize([r.samples_per_s for r in self.replicates])
        r, steady = self.records, self._steady()
        workers = self.loader_workers()
        rounds = min(WINDOW_ROUNDS, len(steady) // (MIN_WINDOWS * workers)) if workers else 1
        size = max(1, rounds) * max(1, workers)
        windows = [steady[i : i + size] for i in range(0, len(steady) - size + 1, size)]
        return summarize(
            [
                sum(r["samples"][i] for i in w) / wall
                for w in windows
                if (wall := sum(r["wall"][i] for i in w)) > 0
            ]
        )

    def steps_for(self, measurements: int) -> int:
        """Training steps this run would need for ``measurements`` figures in its throughput
        spread: its steps outside the steady state, and one steady step per figure, or one
        round of the workers when it has them (``throughput_summary``)."""
        return self.steps - len(self._steady()) + measurements * max(1, self.loader_workers())

    def loader_workers(self) -> int:
        """DataLoader workers of the run: the knob when set, else the training loaders'
        ``num_workers`` as the probe saw them. Results stored before the probe recorded it fall
        back to the workers that stamped batches, then to busy child processes (which a
        torch.compile run's compile workers would also count)."""
        workers = self.knobs.get("workers")
        if isinstance(workers, int):
            return workers
        if "loader_workers" in self.workload:
            return int(self.workload["loader_workers"])
        stamps = self.records.get("pipeline")
        if stamps is not None:
            return len(set(stamps.get("worker", [])))
        busy = self.system.get("workers_cpu_percent", 0.0) >= WORKERS_CPU_MIN_PERCENT
        return int(self.system.get("peak_workers") or 0) if busy else 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def label(self, baseline: RunResult | None = None) -> str:
        """The knobs that differ from the baseline, as ``workers=2 preload=ram``."""
        base = baseline.knobs if baseline is not None else {}
        changed = {k: v for k, v in self.knobs.items() if base.get(k) != v}
        if baseline is self or (baseline is not None and not changed):
            return "baseline"
        return " ".join(f"{k}={v}" for k, v in changed.items()) or "run"

    def summary_line(self) -> str:
        if self.error and not self.steps:
            return f"failed: {self.error}"
        return (
            f"{fmt(self.samples_per_s, '.1f')} samples/s, data_time {fmt(self.data_time, '.2f', scale=1e3)} ms, "
            f"batch_time {fmt(self.batch_time, '.2f', scale=1e3)} ms, data share "
            f"{fmt(self.data_share, '.0%')} ({self.steps} steps)"
        )

    def __str__(self) -> str:
        return self.summary_line()

    def _repr_pretty_(self, p, cycle: bool) -> None:
        p.text(self.report())

    def report(self) -> str:
        """A readable breakdown: medians with p10/p90, share, throughput, phases, system, ranks."""
        from speedlab.notebook.report import run_report

        return run_report(self)

    def timeline(self, **kwargs: Any) -> Any:
        """The pipeline chart of this run (a matplotlib Figure)."""
        from speedlab.notebook.plots import timeline_figure

        return timeline_figure(self, **kwargs)

    def to_dict(self, *, records: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "knobs": self.knobs,
            "steps": self.steps,
            "samples": self.samples,
            "samples_per_s": _finite(self.samples_per_s),
            "data_time": _finite(self.data_time),
            "batch_time": _finite(self.batch_time),
            "step_time": _finite(self.step_time),
            "data_share": _finite(self.data_share),
            "data_time_p10": _finite(self.data_summary.p10),
            "data_time_p90": _finite(self.data_summary.p90),
            "batch_time_p10": _finite(self.batch_summary.p10),
            "batch_time_p90": _finite(self.batch_summary.p90),
            "phases": self.phases,
            "system": self.system,
            "final_loss": self.final_loss,
            "losses": self.losses,
            "error": self.error,
            "notes": self.notes,
            "wall_time": self.wall_time,
            "device": self.device,
            "workload": self.workload,
            "speedup": self.speedup,
            "diagnosis": [f.to_dict() if hasattr(f, "to_dict") else f for f in self.diagnosis],
            "ranks": self.ranks,
            "replicates": [r.to_dict(records=records) for r in self.replicates],
            "host_syncs": self.host_syncs,
        }
        if records:
            out["records"] = self.records
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Rebuild a result from ``to_dict()`` output (figures are re-derived from records)."""
        return cls(
            knobs=dict(data.get("knobs", {})),
            records=_records_from_dict(data.get("records", {})),
            phases=dict(data.get("phases", {})),
            system=dict(data.get("system", {})),
            final_loss=data.get("final_loss"),
            losses=[tuple(x) for x in data.get("losses", [])],
            error=data.get("error"),
            notes=list(data.get("notes", [])),
            wall_time=data.get("wall_time", 0.0),
            device=data.get("device", "cpu"),
            workload=dict(data.get("workload", {})),
            speedup=data.get("speedup"),
            diagnosis=list(data.get("diagnosis", [])),
            ranks=list(data.get("ranks", [])),
            replicates=[cls.from_dict(r) for r in data.get("replicates", [])],
            host_syncs=dict(data.get("host_syncs", {})),
        )


def _records_from_dict(records: dict[str, Any]) -> dict[str, Any]:
    """The step records, and the worker stamps (``pipeline``, see speedlab.measure.pipeline) if any."""
    out: dict[str, Any] = {k: list(records.get(k, [])) for k in RECORD_KEYS}
    out.update({k: list(records[k]) for k in DEVICE_RECORD_KEYS if k in records})
    if "pipeline" in records:
        out["pipeline"] = {k: list(v) for k, v in records["pipeline"].items()}
    return out


def _finite(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
