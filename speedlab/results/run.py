"""Result objects: one RunResult per training run, with its ranks' records.

Headline figures are derived from the per-step records, steady-state steps only, so a stored
result re-read from the run store gives the same figures as the live one. A result is built
once, from what the fit measured, the knobs and the analysis (speedlab.run.sweep), and is not
changed after: ``dataclasses.replace`` makes a new one where a later step adds to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from speedlab.results.codec import Name, Record, coerce, fields_to_plain, from_plain
from speedlab.results.comparison import Comparison
from speedlab.results.device import DeviceSplit
from speedlab.results.findings import Finding
from speedlab.results.knobs import Knobs
from speedlab.results.prediction import Guess, Prediction
from speedlab.results.stats import Summary, summarize
from speedlab.results.steady import Steady, rounds, steady
from speedlab.results.system import SystemSummary
from speedlab.results.table import fmt


class Phase(Name):
    """The phase of a training step; figures are read from the ``steady`` steps."""

    setup = "setup"
    preload = "preload"
    compile = "compile"
    epoch_start = "epoch_start"
    warmup = "warmup"
    steady = "steady"
    validation = "validation"


PHASES = tuple(phase.value for phase in Phase)
STEP_PHASES = (Phase.compile, Phase.epoch_start, Phase.warmup, Phase.steady)
"""The phases a training step is in; the others are spans outside the steps."""
RECORD_KEYS = ("t", "data_time", "batch_time", "wall", "samples", "phase", "epoch")
XLA_RECORD_KEYS = ("compile_time", "compiles", "host_transfers")
"""Records of a run on an XLA device only (speedlab.measure.devices.xla)."""
DEVICE_RECORD_KEYS = ("host_data_time", "copy_time", "launch_lag", *XLA_RECORD_KEYS)
"""Records of a run on an asynchronous device only (see ``RunResult``)."""
GC_RECORD_KEYS = ("gc_time",)
"""Seconds of full garbage collection in each step (speedlab.measure.heap), which runs stored
before it was measured lack."""
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


@dataclass(frozen=True)
class RankRecord(Record):
    """One rank of a multi-process run: its own figures (``RunResult.steady``) and step records.

    ``work_time`` is the rank's own work per step: data_time + batch_time - sync_time, what it
    would take if no rank waited for another. ``sync_time`` is the gradient synchronisation
    per step, where a communication hook timed it.
    """

    rank: int
    host: str = ""
    pid: int | None = None
    steps: int = 0
    samples: int = 0
    samples_per_s: float | None = None
    data_time: float | None = None
    batch_time: float | None = None
    sync_time: float | None = None
    work_time: float | None = None
    data_share: float | None = None
    error: str | None = None
    system: SystemSummary = field(default_factory=SystemSummary)
    records: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunResult:
    """What one training run measured, and what it was judged.

    ``knobs`` are the settings asked for; ``ran_otherwise`` holds the knobs that ran with
    another value (the loader's real worker count, the precision Lightning used, a compile
    that compiled nothing...), so ``ran``, the knobs in force, is ``knobs`` with those values:
    labels, comparisons and the doctor read ``ran``. ``fit`` numbers the fits of a cell that
    made several.

    ``records`` holds one entry per training step in parallel lists: ``t`` (seconds since the
    fit started, when the step began waiting for its batch), ``data_time``, ``batch_time``,
    ``wall`` (wall time of the whole step, validation excluded, so it also holds other
    callbacks and logging), ``samples``, ``phase`` and ``epoch``. Figures are read from the
    steps in the ``steady`` phase by one rule (``steady``; speedlab.results.steady): averages
    over whole rounds of the DataLoader workers, pauses left out and named; ``gc_time``, the
    seconds of full garbage collection in each step, tells a collection's pause by what it is
    (absent from runs stored before it was measured). On an asynchronous device (CUDA) the steps' edges come from the
    device's own timeline: data_time is the time the device sat idle for want of input,
    ``copy_time`` the host-to-device copy's part of it, and ``host_data_time`` the host's wait
    for the loader, which the device's work may hide; ``launch_lag`` (for the first steps, where
    the device has a clock to compare) how long after the host queued a step's last operation
    the device finished it: near zero where the device waited on the host's launches. On an
    XLA device, ``compile_time`` and ``compiles`` are the graph compilations of each step (out
    of its batch_time) and ``host_transfers`` its transfers to the host. ``records["pipeline"]``, when present,
    holds the DataLoader workers' batch timestamps (``worker``, ``start``, ``end``, ``taken``;
    see speedlab.measure.pipeline). ``host_syncs``, on a GPU, counts the synchronizing CUDA
    operations of a few warm-up steps per source line (``{"steps": n, "lines": [{"file",
    "line", "count"}]}``; speedlab.measure.syncs). ``flops`` holds one warm-up step's count
    (``per_step``, that ``step``'s index, the ``uncounted`` ops that had no formula) and the
    device's ``peak`` FLOP/s with its ``peak_source`` (speedlab.measure.flops). ``device_busy``,
    on a device that traces its work, holds the seconds it worked in one warm-up step (``busy``,
    that ``step``'s index, the trace's ``source``; speedlab.measure.devices.busy), which
    ``device_split`` reads, or why no step may be traced there (``untraced``).

    ``comparison`` is the run's comparison with its sweep's baseline and ``break_even`` the
    steps after which each up-front knob (compile, preload) pays back (None: never), both
    judged once when the sweep was assembled. ``prediction`` is speedlab's prediction of that
    speedup and ``guess`` the learner's, both made before the run (speedlab.results.prediction).
    """

    knobs: Knobs = field(default_factory=Knobs)
    ran_otherwise: dict[str, Any] = field(default_factory=dict)
    fit: int | None = None
    records: dict[str, list] = field(default_factory=empty_records)
    phases: dict[str, float] = field(default_factory=dict)
    system: SystemSummary = field(default_factory=SystemSummary)
    final_loss: float | None = None
    losses: list[tuple[int, float]] = field(default_factory=list)
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    wall_time: float = 0.0
    device: str = "cpu"
    workload: dict[str, Any] = field(default_factory=dict)
    diagnosis: list[Finding] = field(default_factory=list)
    ranks: list[RankRecord] = field(default_factory=list)
    replicates: list[RunResult] = field(default_factory=list)
    host_syncs: dict[str, Any] = field(default_factory=dict)
    flops: dict[str, Any] = field(default_factory=dict)
    device_busy: dict[str, Any] = field(default_factory=dict)
    comparison: Comparison | None = None
    break_even: dict[str, float | None] = field(default_factory=dict)
    prediction: Prediction | None = None
    guess: Guess | None = None

    def __post_init__(self) -> None:
        coerce(self)

    @property
    def ran(self) -> Knobs:
        """The knobs in force: those asked for, with the values of the ones that ran otherwise."""
        if not self.ran_otherwise:
            return self.knobs
        return Knobs.from_dict(self.knobs.as_dict() | self.ran_otherwise)

    @property
    def speedup(self) -> float | None:
        """samples/s over the baseline's, as judged when the sweep was assembled."""
        speedup = self.comparison.speedup if self.comparison is not None else math.nan
        return speedup if math.isfinite(speedup) else None

    @property
    def steps(self) -> int:
        return len(self.records["data_time"])

    @property
    def samples(self) -> int:
        return int(sum(self.records["samples"]))

    def _steady(self) -> list[int]:
        return [i for i, phase in enumerate(self.records["phase"]) if phase == "steady"]

    @cached_property
    def steady(self) -> Steady:
        """The steady steps' figures under the one rule every figure of the run follows:
        averages over whole rounds of the workers, pauses left out (speedlab.results.steady)."""
        return steady(self.records, self._steady(), self.loader_workers())

    def _mean(self, key: str) -> float:
        steps = self.steady.steps
        return sum(self.records[key][i] for i in steps) / len(steps) if steps else math.nan

    @property
    def data_summary(self) -> Summary:
        """The spread of the counted steps' data_time (p10, p90 beside the average)."""
        return summarize([self.records["data_time"][i] for i in self.steady.steps])

    @property
    def batch_summary(self) -> Summary:
        """The spread of the counted steps' batch_time: each step's wall less its data_time."""
        r = self.records
        return summarize([r["wall"][i] - r["data_time"][i] for i in self.steady.steps])

    @property
    def data_time(self) -> float:
        """The time a steady step waited for its batch, on average (``steady``)."""
        return self.steady.data_time

    @property
    def batch_time(self) -> float:
        """The rest of a steady step, on average: forward, backward, optimizer step and the
        loop's hooks and logging (``steady``)."""
        return self.steady.batch_time

    @property
    def host_data_time(self) -> float:
        """The host's wait for the loader (data_time itself where the two clocks are one)."""
        return self._mean("host_data_time" if "host_data_time" in self.records else "data_time")

    @property
    def copy_time(self) -> float | None:
        """The host-to-device copy's part of data_time, where the device's timeline shows it."""
        return self._mean("copy_time") if "copy_time" in self.records else None

    @property
    def step_time(self) -> float:
        return self.steady.step_time

    @property
    def device_split(self) -> DeviceSplit | None:
        """A steady step's device time split into busy, idle for want of input and idle
        waiting for the host's launches, on a device that traced its work; else None."""
        return DeviceSplit.of(self.data_time, self.batch_time, self.device_busy.get("busy"))

    @property
    def flops_per_step(self) -> int | None:
        """FLOPs of one training step (matmuls, convolutions, attention; forward and backward),
        counted once; None where not counted, or where an op had no formula."""
        per_step = self.flops.get("per_step")
        return per_step if per_step and not self.flops.get("uncounted") else None

    @property
    def mfu(self) -> float | None:
        """The share of the device's peak FLOP/s the counted steps reached (model FLOPs
        utilisation): FLOPs per sample times samples/s, over the peak; None where unknown."""
        per_step, peak, step = self.flops_per_step, self.flops.get("peak"), self.flops.get("step")
        if not per_step or not peak or step is None or step >= self.steps:
            return None
        samples = self.records["samples"][step]
        return per_step / samples * self.samples_per_s / peak if samples else None

    @property
    def data_share(self) -> float:
        return self.steady.data_share

    @property
    def samples_per_s(self) -> float:
        """Samples over the time of the counted steady steps (``steady``); with replicates,
        their median."""
        if self.replicates:
            return summarize([r.samples_per_s for r in self.replicates]).median
        return self.steady.samples_per_s

    @property
    def throughput_summary(self) -> Summary:
        """Spread of samples/s across replicates (``--repeat``), or else over the single run's
        counted steady steps (``steady``: pauses left out): step by step without DataLoader workers, and over windows of
        ``WINDOW_ROUNDS`` rounds of the workers with them (fewer rounds if the run has fewer
        than ``MIN_WINDOWS`` windows of those). Workers hand over batches in bursts (several
        ready at once, then a long wait), so one step's throughput says little on its own.
        The batches go to the workers in turn, so a window of whole rounds holds as many
        batches of each worker, and a slow worker weighs the same in every window."""
        if self.replicates:
            return summarize([r.samples_per_s for r in self.replicates])
        r, steps = self.records, self.steady.steps
        workers = self.loader_workers()
        many = min(WINDOW_ROUNDS, len(steps) // (MIN_WINDOWS * workers)) if workers else 1
        windows = rounds(steps, max(1, many) * max(1, workers))
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
        """DataLoader workers the run loaded with: the training loaders' ``num_workers`` as
        the probe saw them. Results stored before the probe recorded it fall back to the
        workers that stamped batches, then to busy child processes (which a torch.compile
        run's compile workers would also count)."""
        workers = self.ran.get("workers")
        if isinstance(workers, int):
            return workers
        if "loader_workers" in self.workload:
            return int(self.workload["loader_workers"])
        stamps = self.records.get("pipeline")
        if stamps is not None:
            return len(set(stamps.get("worker", [])))
        busy = (self.system.workers_cpu_percent or 0.0) >= WORKERS_CPU_MIN_PERCENT
        return self.system.peak_workers if busy else 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def settings(self) -> dict[str, Any]:
        """The knobs asked for, with the fit's number in a cell that made several."""
        return self.knobs.as_dict() | ({"fit": self.fit} if self.fit is not None else {})

    def label(self, baseline: RunResult | None = None) -> str:
        """The knobs that differ from the baseline, as ``workers=2 preload=ram``; a knob that
        ran otherwise than asked says so: ``workers=2 (ran 0)``. In a cell that fits more than
        once, the fit's number follows: ``baseline fit=2``."""
        base = baseline.knobs.as_dict() if baseline is not None else {}
        changed = {k: v for k, v in self.knobs.as_dict().items() if base.get(k) != v}
        fit = f" fit={self.fit}" if self.fit is not None else ""
        if baseline is self or (baseline is not None and not changed):
            return "baseline" + fit
        otherwise = self.ran_otherwise
        return (
            " ".join(
                f"{k}={_shown(v)}" + (f" (ran {_shown(otherwise[k])})" if k in otherwise else "")
                for k, v in changed.items()
            )
            or "run"
        ) + fit

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
        """A readable breakdown: averages with p10/p90, share, throughput, phases, system, ranks."""
        from speedlab.notebook.report import run_report

        return run_report(self)

    def timeline(self, **kwargs: Any) -> Any:
        """The pipeline chart of this run (a matplotlib Figure)."""
        from speedlab.notebook.plots import timeline_figure

        return timeline_figure(self, **kwargs)

    def to_dict(self, *, records: bool = True) -> dict[str, Any]:
        """Every field as plain data, with the headline figures beside them (for the run
        store's columns and readers of the JSON); without the step records if not ``records``."""
        out = fields_to_plain(self)
        out |= {
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
            "speedup": self.speedup,
        }
        if not records:
            del out["records"]
            out["replicates"] = [r.to_dict(records=False) for r in self.replicates]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        """Rebuild a result from ``to_dict()`` output (figures are re-derived from records).

        Results stored by earlier versions kept a multi-fit cell's fit number among the knobs."""
        knobs = dict(data.get("knobs") or {})
        fit = knobs.pop("fit", None)
        data = {**data, "knobs": knobs, "fit": data.get("fit", fit)}
        data["records"] = _records_from_dict(data.get("records") or {})
        return from_plain(cls, data)


def _shown(value: Any) -> str:
    """A knob value as labels show it: ``on``/``off`` for a switch."""
    return ("on" if value else "off") if isinstance(value, bool) else str(value)


def _records_from_dict(records: dict[str, Any]) -> dict[str, Any]:
    """The step records, and the worker stamps (``pipeline``, see speedlab.measure.pipeline) if any."""
    out: dict[str, Any] = {k: list(records.get(k, [])) for k in RECORD_KEYS}
    out.update(
        {k: list(records[k]) for k in (*DEVICE_RECORD_KEYS, *GC_RECORD_KEYS) if k in records}
    )
    if "pipeline" in records:
        out["pipeline"] = {k: list(v) for k, v in records["pipeline"].items()}
    return out


def _finite(x: float) -> float | None:
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None
