"""Bottleneck doctor: a verdict on each run from its measured figures, and fair comparisons.

- ``diagnose(run)`` reads one RunResult and returns Findings: what limits the run (``kind``),
  the figures that show it (``evidence``), what to do (``advice``) and the knob to try.
- ``diagnose_sweep(sweep)`` adds what only a sweep shows: the best run and which knobs helped
  beyond noise, compile payback, batch_time growing as workers are added.
- ``next_experiment(sweep)`` writes the ``%%profile_train`` line to run next.
- ``compare(a, b)`` says whether two runs differ beyond noise (medians and interquartile
  ranges of the throughput step by step or over windows of steps, or of the ``--repeat``
  replicates).

Every threshold is a module constant with its reason beside it. Advice is for the hardware the
run measured: a knob that cannot help there is named as such.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speedlab.measure.syncs import in_library, source_place
from speedlab.results.compare import (
    NOISY_IQR,
    Comparison,
    compare,
    other_processes_cores,
    run_cores,
)
from speedlab.results.run import RunResult, SweepResult
from speedlab.run.knobs import KNOBS

if TYPE_CHECKING:
    from speedlab.analysis.linter import LintFinding

__all__ = [
    "KINDS",
    "Comparison",
    "Finding",
    "compare",
    "diagnose",
    "diagnose_sweep",
    "next_experiment",
    "next_step",
]

# -- thresholds ---------------------------------------------------------------------------------

DATA_SHARE_WARN = 0.10
"""data_time over step_time from which a run is data-bound (a warning)."""
DATA_SHARE_CRITICAL = 0.20
"""data share from which data-bound is critical: a fifth of every step waits for data."""
LOADER_BUSY_MIN = 0.5
"""CPU each loading process keeps busy (in cores, see ``loader_busy``) below which a data-bound
run is I/O-bound (the loaders mostly wait) rather than CPU-bound (decoding and augmenting keep
them busy)."""
CONTENDED_CORES = 0.5
"""CPU (in cores) other processes must use during a run before the evidence says the machine
was shared: the run's CPU figures then understate what its processes wanted, and the I/O-vs-CPU
split is less certain."""
WORKERS_KEEP_UP = 0.5
"""Share of their time the workers spend making batches (from their stamps) below which they
keep up: a data wait is then the hand-over of batches to the main process, not the loading."""
IOWAIT_NOTABLE = 5.0
"""Machine iowait percent worth naming in the evidence (real disks; a simulated throttle sleeps
and shows none)."""
MODEL_BOUND_DATA_SHARE = 0.05
"""data share below which the model's compute is the whole step."""
OVERHEAD_STEP_S = 0.008
"""Median step time below which per-step overhead dominates. Lightning's fixed work per step
(hooks, logging, optimizer bookkeeping, zero_grad) and kernel launches cost about 1-3 ms, so
a step under 8 ms spends a large part of its time on them."""
OVERHEAD_STEP_CRITICAL_S = 0.004
"""Median step time below which overhead is most of the step (critical)."""
BATCH_SIZE_FACTOR = 4
"""How much larger a batch the doctor suggests for an overhead-bound run."""
EPOCH_START_SHARE_WARN = 0.10
"""Share of the training time lost to epoch-start gaps (after the first epoch) that warns."""
EPOCH_START_SHARE_CRITICAL = 0.25
"""Epoch-start share that is critical."""
VALIDATION_SHARE_WARN = 0.25
"""Share of the fit's wall time spent validating that warns."""
VALIDATION_SHARE_CRITICAL = 0.50
"""Validation share that is critical: more time validating than training."""
LIMIT_VAL_BATCHES = 0.25
"""The ``limit_val_batches`` the doctor suggests for a validation-heavy run."""
COMPILE_PAYBACK_STEPS = 1000
"""Break-even step count up to which compiling is reported as paying off (info); beyond it, or
never, a warning."""
BATCH_TIME_GROWTH = 0.20
"""Growth of batch_time between the fewest and the most workers of a sweep that shows the
workers taking cores from the model."""
STRAGGLER_FACTOR = 2.0
"""A worker is a straggler when it takes this many times longer to make a batch than the
others (median times from the workers' batch stamps, ``records["pipeline"]``)."""
STRAGGLER_MIN_S = 0.002
"""...and at least this much longer (smaller gaps are scheduling noise)."""
SYNC_PLACES_SHOWN = 3
"""Source lines named in a measured host_sync finding, most syncs first."""
STEPS_FOR_FIGURES = 5
"""Fewest steady steps before the figure-based rules say anything about a run."""

SEVERITIES = ("critical", "warn", "info")
KINDS = (
    "verdict",
    "notebook_trap",
    "overhead_bound",
    "io_bound",
    "cpu_bound",
    "oversubscribed",
    "straggler",
    "epoch_start",
    "validation_heavy",
    "host_sync",
    "model_bound",
    "compile_payback",
)
"""Every kind of finding, in the doctor's order: findings are listed, and autotune tries their
knobs, in this order (a triage: what blocks or distorts the others first), then by severity.
``verdict`` is the per-sweep summary; ``notebook_trap`` covers worker set-ups that fail or only
work by accident in a notebook."""

_SYNC_RULES = frozenset({"item", "cpu", "cuda_sync", "nonzero_sync", "empty_cache", "host_tensor"})


@dataclass(frozen=True)
class Finding:
    """One thing that limits a run, shown by its figures, with what to do about it.

    Args:
        kind: one of ``KINDS``.
        evidence: the measured figures that show it, in words.
        advice: what to do, and when it will not help.
        knob: the knob to try (a ``KNOBS`` name, or ``trainer.<argument>``), or None.
        severity: ``critical``, ``warn`` or ``info``.
        value: the knob value to try, or None.
    """

    kind: str
    evidence: str
    advice: str
    knob: str | None = None
    severity: str = "warn"
    value: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.severity not in SEVERITIES:
            raise ValueError(f"Finding(kind={self.kind!r}, severity={self.severity!r}): unknown.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        tried = f" Try {_option_text(self.knob, self.value)}." if self.knob else ""
        return f"[{self.severity}] {self.kind}: {self.evidence} {self.advice}{tried}"


def unique_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Each finding once (the same kind on the same evidence), in first-seen order."""
    return list({(f.kind, f.evidence): f for f in findings}.values())


def _order(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (KINDS.index(f.kind), SEVERITIES.index(f.severity)))


# -- what a run is made of ----------------------------------------------------------------------


def _threads(run: RunResult) -> int:
    """torch's intra-op threads in the main process (``torch.get_num_threads()``)."""
    return int(run.system.get("torch_threads") or 1)


def _steady(run: RunResult, key: str) -> list[float]:
    r = run.records
    return [v for v, p in zip(r[key], r["phase"], strict=True) if p == "steady"]


def _step_wall(run: RunResult) -> float:
    walls = _steady(run, "wall")
    return statistics.median(walls) if walls else math.nan


def _batch(run: RunResult) -> int:
    """Samples per step (the batch size the run really used)."""
    samples = _steady(run, "samples") or run.records["samples"]
    return int(statistics.median(samples)) if samples else 0


def workers_making(run: RunResult) -> float | None:
    """Share of their time the workers spent making batches (their stamps), or None."""
    stamps = run.records.get("pipeline") or {}
    batches: dict[int, list[tuple[float, float]]] = {}
    for worker, start, end in zip(
        stamps.get("worker", []), stamps.get("start", []), stamps.get("end", []), strict=False
    ):
        batches.setdefault(worker, []).append((start, end))
    shares = []
    for made in batches.values():
        lived = max(end for _, end in made) - min(start for start, _ in made)
        if lived > 0:
            shares.append(sum(end - start for start, end in made) / lived)
    return statistics.fmean(shares) if shares else None


def loader_busy(run: RunResult) -> float | None:
    """The CPU each data-loading process kept busy, in cores (0-1); None without CPU figures.

    With workers: their measured CPU over the cores they could use (a worker runs one torch
    thread), per second spent making batches when their stamps say how long that was. Without
    workers the main process loads between steps, in the training thread: where the sampler
    measured that thread's CPU, loading is what it used beyond the compute part of the step.
    Otherwise the process's CPU is split by a model: on a CPU, the step computes on torch's
    threads (``torch_threads``, at most the cores), and while the main thread loads or waits,
    torch's other threads are taken to spin (OpenMP waits actively for a while), so they count
    as busy; loading's share is what is left. On a GPU the step keeps one core busy. All three
    assume the run had the cores to itself: when other processes take CPU, the main process
    gets less and loading looks idler than it was.
    """
    s = run.system
    if s.get("main_cpu_percent") is None:
        return None
    cores, workers = run_cores(run), run.loader_workers()
    if workers > 0:
        cpu = s["workers_cpu_percent"] / 100 / min(workers, cores)
        making = workers_making(run)
        return min(cpu / making if making else cpu, 1.0)
    share = waiting_share(run)
    if not share > 0:
        return None
    thread = s.get("train_thread_cpu_percent")
    if thread is not None:
        # The training thread is busy all through the compute part of the step; what it
        # used beyond that went to loading.
        return min(max((thread / 100 - (1 - share)) / share, 0.0), 1.0)
    main = s["main_cpu_percent"] / 100
    if run.device == "cpu":
        threads = min(_threads(run), cores)
        loading = main - (1 - share) * threads - share * (threads - 1)
    else:
        loading = main - (1 - share)
    return min(max(loading / share, 0.0), 1.0)


@cache
def cpu_has_bf16() -> bool | None:
    """Whether this CPU has bf16 instructions (AVX512-BF16 or AMX); None where unknown."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        [],
    )
    return bool({"avx512_bf16", "amx_bf16"} & set(flags))


def waiting_share(run: RunResult) -> float:
    """The share of the steady steps' time spent waiting for data: ``data_share`` (medians),
    or the share of the summed times where that is larger. Workers that cannot keep up hand
    over their batches in bursts: the median step may not wait at all while the run waits
    a third of its time."""
    data, batch = run.steady_total("data_time"), run.steady_total("batch_time")
    share = run.data_share
    if math.isnan(share) or data + batch <= 0:
        return share
    return max(share, data / (data + batch))


def _bursty(run: RunResult, share: float) -> bool:
    """Whether the waits come in bursts: the waiting ``share`` well above the median step's."""
    return share > run.data_share + DATA_SHARE_WARN / 2


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


# -- rules on one run ---------------------------------------------------------------------------


def _data_bound(run: RunResult) -> list[Finding]:
    share = waiting_share(run)
    if not share >= DATA_SHARE_WARN:
        return []
    severity = "critical" if share >= DATA_SHARE_CRITICAL else "warn"
    workers, cores, threads = run.loader_workers(), run_cores(run), _threads(run)
    head = (
        f"Each step waits {_ms(run.data_time)} for data and computes {_ms(run.batch_time)}: "
        f"data is {share:.0%} of the step."
    )
    if _bursty(run, share):
        mean = run.steady_total("data_time") / run.records["phase"].count("steady")
        head = (
            f"Steps wait {_ms(mean)} for data on average, in bursts (the median step waits "
            f"{_ms(run.data_time)}), and compute {_ms(run.batch_time)}: data is {share:.0%} of "
            "the time."
        )
    busy = loader_busy(run)
    if busy is None:
        return [
            Finding(
                "cpu_bound",
                head + " No CPU figures were sampled, so I/O and CPU cannot be told apart.",
                "Try DataLoader workers and --preload ram "
                "(%speedlab explain workers says when each helps).",
                "workers",
                severity,
                max(1, cores - threads),
            )
        ]
    making = workers_making(run) if workers else None
    if making is not None and making < WORKERS_KEEP_UP:
        return [_handover(run, head, making, severity)]
    if workers:
        who = (
            f"The {workers} worker(s) used {run.system['workers_cpu_percent']:.0f}% of a core "
            "together"
            + (f" while making batches {making:.0%} of the time" if making is not None else "")
            + f": each kept about {busy:.0%} of a core busy"
        )
    elif run.system.get("train_thread_cpu_percent") is not None:
        who = (
            "Loading runs in the training thread (workers=0), which was busy "
            f"{run.system['train_thread_cpu_percent']:.0f}% of the time: loading kept it busy "
            f"about {busy:.0%} of its data wait"
        )
    else:
        who = (
            f"Loading runs in the main process (workers=0), which used "
            f"{run.system['main_cpu_percent']:.0f}% of a core with torch's {threads} thread(s); "
            f"loading kept it busy about {busy:.0%} of its data wait"
        )
    iowait = run.system.get("iowait_percent")
    who += (
        f"; the machine's iowait was {iowait:.0f}%." if iowait and iowait >= IOWAIT_NOTABLE else "."
    )
    others = other_processes_cores(run)
    if others >= CONTENDED_CORES:
        who += (
            f" Other processes used about {others:.1f} of the machine's "
            f"{run.system.get('cores')} cores meanwhile: this run's figures are slower than on a "
            "quiet machine, and loading may have waited for CPU rather than for data."
        )
    preload = run.knobs.get("preload")
    if preload in ("ram", "shm"):
        who += (
            f" With preload={preload} the data is read from memory, so the wait is CPU work "
            "(decoding or the per-step transform, and the hand-over), not storage."
        )
    elif busy < LOADER_BUSY_MIN:
        return [_io_bound(run, head + " " + who, severity)]
    return [_cpu_bound(run, head + " " + who, severity)]


def _handover(run: RunResult, head: str, making: float, severity: str) -> Finding:
    evidence = (
        f"{head} The {run.loader_workers()} worker(s) spent only {making:.0%} of their time making "
        "batches: they keep up, and the wait is the hand-over, the main process receiving each "
        "batch from a worker (through shared memory)."
    )
    advice = (
        "More workers will not shorten it. The hand-over costs per byte: smaller batches in "
        "memory (uint8 images, normalised on the device) shrink it; --workers 0 avoids it when "
        "loading itself is cheap (compare both)."
    )
    return Finding("cpu_bound", evidence, advice, None, severity)


def _io_bound(run: RunResult, evidence: str, severity: str) -> Finding:
    workers, cores = run.loader_workers(), run_cores(run)
    if workers == 0:
        advice = (
            "The loader waits for storage, not for the CPU. DataLoader workers keep several reads "
            "in flight while the model trains, and waiting workers cost almost no CPU, so they "
            "help even on a few cores. If the data fits in memory, --preload ram reads it once "
            "before training and removes the reads from every step."
        )
        return Finding("io_bound", evidence, advice, "workers", severity, max(2, cores))
    advice = (
        f"{workers} worker(s) already wait in parallel and the step still waits. "
        "--preload ram reads every file once, before training (the preload phase), if the "
        "data fits in memory; otherwise more workers put more reads in flight."
    )
    return Finding("io_bound", evidence, advice, "preload", severity, "ram")


def _cpu_bound(run: RunResult, evidence: str, severity: str) -> Finding:
    workers, cores, threads = run.loader_workers(), run_cores(run), _threads(run)
    spare = cores - threads - workers
    preload = run.knobs.get("preload", "off")
    tight = (
        f"This machine has {cores} cores and torch computes on {threads} thread(s) "
        f"(torch.get_num_threads()), so "
        + (
            "workers would take CPU from the model. "
            if spare <= 0
            else f"{spare} core(s) are free. "
        )
    )
    if preload in (None, "off"):
        advice = (
            "Decoding and augmenting keep the loader's CPU busy. "
            + tight
            + "--preload ram decodes every sample once, before training (augmentation still runs "
            "each step); DataLoader workers (--workers N) decode in parallel and pay off when "
            "cores are free."
        )
        if spare > 0:
            return Finding("cpu_bound", evidence, advice, "workers", severity, workers + spare)
        return Finding("cpu_bound", evidence, advice, "preload", severity, "ram")
    advice = (
        "The samples are already preloaded; what is left is the per-step transform "
        "(augmentation, collation). " + tight
    )
    if spare > 0:
        advice += f"Workers can run it beside the model: --workers {workers + spare}."
        return Finding("cpu_bound", evidence, advice, "workers", severity, workers + spare)
    advice += "No knob frees CPU here: a lighter transform, or augmenting on the GPU, would."
    return Finding("cpu_bound", evidence, advice, None, severity)


def _overhead_bound(run: RunResult) -> list[Finding]:
    step = run.step_time
    if not step < OVERHEAD_STEP_S:
        return []
    batch = _batch(run)
    severity = "critical" if step < OVERHEAD_STEP_CRITICAL_S else "warn"
    evidence = (
        f"A step takes {_ms(step)} for {batch} samples (data {_ms(run.data_time)}, batch "
        f"{_ms(run.batch_time)}); the framework's fixed work per step (hooks, logging, optimizer "
        "bookkeeping, kernel launches) is about 1-3 ms, so much of each step is overhead."
    )
    advice = (
        "A larger batch spreads that fixed cost over more samples, so samples/s rises until the "
        "hardware is busy. It changes the optimisation too: compare samples/s, and scale the "
        "learning rate if the loss suffers."
    )
    return [
        Finding(
            "overhead_bound", evidence, advice, "batch_size", severity, BATCH_SIZE_FACTOR * batch
        )
    ]


def _oversubscribed(run: RunResult) -> list[Finding]:
    workers, cores, threads = run.loader_workers(), run_cores(run), _threads(run)
    if workers == 0 or workers + threads <= cores or _waits_on_storage(run):
        return []
    severity = "critical" if workers + threads >= 2 * cores else "warn"
    fewer = max(0, cores - threads)
    fewer = fewer if fewer < workers else workers - 1
    used = run.system.get("workers_cpu_percent", 0.0) / 100
    evidence = (
        f"{workers} worker(s) + {threads} torch thread(s) (torch.get_num_threads()) = "
        f"{workers + threads} threads on {cores} cores; the workers used {used:.2f} cores and "
        f"batch_time is {_ms(run.batch_time)}."
    )
    advice = (
        "Each time a worker runs it takes a core from one of torch's threads, and those wait "
        "for each other at every operation: batch_time grows as workers are added, even when "
        "they do little. Use fewer workers (with 0, loading runs between steps), or give torch "
        f"fewer threads: torch.set_num_threads({max(1, cores - workers)}) at the top of the cell."
    )
    return [Finding("oversubscribed", evidence, advice, "workers", severity, fewer)]


def _waits_on_storage(run: RunResult) -> bool:
    """Whether the run is I/O-bound: its loaders mostly wait, so they take no cores."""
    return any(f.kind == "io_bound" for f in _data_bound(run))


def _epoch_start(run: RunResult) -> list[Finding]:
    r = run.records
    starts = [i for i in range(1, run.steps) if r["epoch"][i] != r["epoch"][i - 1]]
    if not starts:
        return []
    typical = run.data_time
    gaps = [max(0.0, r["data_time"][i] - typical) for i in starts]
    total = sum(r["wall"])
    share = sum(gaps) / total if total > 0 else 0.0
    if share < EPOCH_START_SHARE_WARN:
        return []
    severity = "critical" if share >= EPOCH_START_SHARE_CRITICAL else "warn"
    workers = run.loader_workers()
    evidence = (
        f"{len(starts)} epoch(s) after the first each began with a wait of "
        f"{statistics.median(gaps):.2f} s (median) for the first batch, against {_ms(typical)} "
        f"normally: {sum(gaps):.2f} s, {share:.0%} of the training time."
    )
    if workers and not run.knobs.get("persistent_workers"):
        advice = (
            f"Without persistent workers, the {workers} worker process(es) start again every "
            "epoch. --persistent-workers on keeps them alive (and their memory) for the whole run."
        )
        return [Finding("epoch_start", evidence, advice, "persistent_workers", severity, True)]
    advice = (
        "Persistent workers are on or there are none, so this is work done at each epoch start: "
        "rebuilding the dataset or loader in train_dataloader(), or the first batches being "
        "made. Fewer, longer epochs spread it."
    )
    return [Finding("epoch_start", evidence, advice, None, severity)]


def _validation_heavy(run: RunResult) -> list[Finding]:
    seconds = run.phases.get("validation", 0.0)
    share = seconds / run.wall_time if run.wall_time > 0 else 0.0
    if share < VALIDATION_SHARE_WARN:
        return []
    severity = "critical" if share >= VALIDATION_SHARE_CRITICAL else "warn"
    evidence = f"Validation took {seconds:.2f} s of the {run.wall_time:.2f} s fit ({share:.0%})."
    advice = (
        "Validate less often or on fewer batches: Trainer(val_check_interval=..., "
        "check_val_every_n_epoch=..., limit_val_batches=...). The data knobs change only the "
        "training loader, so a slow validation loader keeps its own settings."
    )
    return [
        Finding(
            "validation_heavy",
            evidence,
            advice,
            "trainer.limit_val_batches",
            severity,
            LIMIT_VAL_BATCHES,
        )
    ]


def _straggler(run: RunResult) -> list[Finding]:
    """One worker making its batches much slower than the others (from the worker stamps)."""
    stamps = run.records.get("pipeline") or {}
    made: dict[int, list[float]] = {}
    for worker, start, end in zip(
        stamps.get("worker", []), stamps.get("start", []), stamps.get("end", []), strict=False
    ):
        made.setdefault(worker, []).append(end - start)
    if len(made) < 2:
        return []
    medians = {w: statistics.median(times) for w, times in made.items()}
    slow = max(medians, key=medians.__getitem__)
    others = statistics.median(m for w, m in medians.items() if w != slow)
    if medians[slow] < STRAGGLER_FACTOR * others or medians[slow] - others < STRAGGLER_MIN_S:
        return []
    evidence = (
        f"Worker {slow} takes {_ms(medians[slow])} to make a batch, the other {len(made) - 1} "
        f"worker(s) {_ms(others)} (medians); batches are handed over in turn, so one step in "
        f"{len(made)} waits for worker {slow}."
    )
    advice = (
        "The slowest worker sets the pace. Look for what makes its samples slow (larger files, a "
        "heavier transform, a core it shares with other work). More workers dilute it; "
        "DataLoader(in_order=False) (PyTorch 2.6+) lets ready batches go first."
    )
    severity = "warn" if waiting_share(run) >= DATA_SHARE_WARN else "info"
    return [Finding("straggler", evidence, advice, "workers", severity, 2 * len(made))]


def _model_bound(run: RunResult) -> list[Finding]:
    if not waiting_share(run) < MODEL_BOUND_DATA_SHARE or run.step_time < OVERHEAD_STEP_S:
        return []
    evidence = (
        f"Data is {run.data_share:.0%} of the step: the model's compute ({_ms(run.batch_time)} "
        "per step) is the bottleneck."
    )
    k = run.knobs
    compiled = k.get("compile") not in (None, "off") or run.phases.get("compile", 0) > 0
    if run.device != "cpu":
        advice = (
            "Speed up the compute: mixed precision (--precision amp) uses the tensor cores, "
            "--compile on fuses kernels, --matmul high allows TF32 on Ampere and newer."
        )
        if k.get("precision") in (None, "32-true", "64-true"):
            return [Finding("model_bound", evidence, advice, "precision", "info", "amp")]
        if not compiled:
            return [Finding("model_bound", evidence, advice, "compile", "info", "on")]
        return [Finding("model_bound", evidence, advice, "matmul", "info", "high")]
    bf16 = cpu_has_bf16()
    advice = (
        "On this CPU: --matmul changes nothing (TF32 needs an NVIDIA GPU); "
        + (
            "this CPU has bf16 instructions, so --precision bf16-mixed may help. "
            if bf16
            else "it has no bf16 instructions (AVX512-BF16/AMX), so bf16-mixed is usually slower. "
        )
        + "--compile on can trim some time per step but costs tens of seconds of compiling first "
        "(compile_payback in a sweep with --compile off,on says when it pays). Beyond that: a "
        "smaller model or a GPU."
    )
    if bf16 and k.get("precision") in (None, "32-true"):
        return [Finding("model_bound", evidence, advice, "precision", "info", "bf16-mixed")]
    if not compiled:
        return [Finding("model_bound", evidence, advice, "compile", "info", "on")]
    return [Finding("model_bound", evidence, advice, None, "info")]


def _host_sync(run: RunResult, lint_findings: Sequence[LintFinding]) -> list[Finding]:
    """What the GPU run measured (``run.host_syncs``), then what the lint read in the source."""
    on_gpu = run.device != "cpu"
    findings = _measured_syncs(run)
    for lf in lint_findings:
        sync = lf.rule in _SYNC_RULES
        evidence = f"Line {lf.line} of {lf.method} ({lf.file}): `{lf.code}`. {lf.message}"
        advice = f"Fix: {lf.fix}"
        if sync and not on_gpu:
            advice += (
                " On this CPU run it costs little (there is no device to wait for); on a GPU it "
                "stalls every step."
            )
        severity = "warn" if on_gpu or not sync else "info"
        findings.append(Finding("host_sync", evidence, advice, None, severity))
    return findings


def _measured_syncs(run: RunResult) -> list[Finding]:
    watched = run.host_syncs
    lines = watched.get("lines") or []
    if not lines:
        return []
    steps = watched["steps"]
    per_step = sum(entry["count"] for entry in lines) / steps
    where = ", ".join(
        f"{source_place(e['file'], e['line'])} ({e['count'] / steps:.3g} a step)"
        for e in lines[:SYNC_PLACES_SHOWN]
    )
    more = len(lines) - SYNC_PLACES_SHOWN
    evidence = (
        f"Measured on the GPU over {steps} warm-up step(s) with "
        f"torch.cuda.set_sync_debug_mode: {per_step:.3g} synchronizing CUDA operation(s) a step, "
        f"at {where}" + (f" and {more} more place(s)." if more > 0 else ".")
    )
    yours = any(not in_library(e["file"]) for e in lines)
    advice = (
        "Each one makes the CPU wait until the GPU has finished all queued work, and the GPU "
        "then idles while the CPU catches up. "
        + (
            "In your code: keep values on the device (self.log(loss) rather than loss.item()), "
            "make tensors with device=self.device, and print no tensors in the step; "
            "speedlab.lint(model) names the pattern on each line. "
            if yours
            else ""
        )
        + "Syncs inside torch or Lightning come from a setting: 16-mixed's gradient scaler "
        "checks for inf once a step (bf16-mixed needs no scaler)."
    )
    return [Finding("host_sync", evidence, advice, None, "warn" if yours else "info")]


_WORKERS_DIED = ("exited unexpectedly", "bus error", "shared memory", "shm")


def _notebook_traps(run: RunResult) -> list[Finding]:
    findings = []
    for note in run.notes:
        if "is defined in the notebook" in note:
            findings.append(
                Finding(
                    "notebook_trap",
                    note,
                    "It ran here only because speedlab switched the workers to fork. Outside "
                    "speedlab, or where fork is missing or unsafe (Windows, macOS), the workers "
                    'fail with "Can\'t get attribute". Move the class into a .py file next to '
                    "the notebook and import it from there.",
                    None,
                    "info",
                )
            )
    error = run.error or ""
    if "is defined in the notebook" in error or "Can't get attribute" in error:
        findings.append(
            Finding(
                "notebook_trap",
                f"The run failed: {error}",
                "Workers started with spawn or forkserver import the dataset's class by name, and "
                "a class defined in a notebook cell cannot be imported. Move it into a .py file "
                "next to the notebook and import it, or use --workers 0.",
                "workers",
                "critical",
                0,
            )
        )
    elif any(word in error.lower() for word in _WORKERS_DIED):
        findings.append(
            Finding(
                "notebook_trap",
                f"The run failed: {error}",
                "DataLoader workers died. In Docker and on Binder the usual cause is a small "
                "/dev/shm (64 MB by default), through which workers hand batches over: use "
                "--workers 0, smaller batches, a larger /dev/shm (docker run --shm-size=1g) or "
                "torch.multiprocessing.set_sharing_strategy('file_system'). Other causes: a "
                'dataset class defined in the notebook under spawn ("Can\'t get attribute" in '
                "the log), or the memory limit (each worker is a whole process).",
                "workers",
                "critical",
                0,
            )
        )
    return findings


def diagnose(
    run: RunResult, *, lint_findings: Sequence[LintFinding] | None = None
) -> list[Finding]:
    """What limits this run, most severe first, each finding with its evidence and the knob to try.

    Args:
        run: a measured run.
        lint_findings: ``speedlab.lint(model)`` of the run's LightningModule, reported as
            ``host_sync`` findings.
    """
    findings = _notebook_traps(run) + _host_sync(run, lint_findings or [])
    if len(_steady(run, "wall")) >= STEPS_FOR_FIGURES:
        for rule in (
            _data_bound,
            _overhead_bound,
            _oversubscribed,
            _epoch_start,
            _validation_heavy,
            _straggler,
            _model_bound,
        ):
            findings += rule(run)
    from speedlab.analysis.ranks import rank_findings  # lazy: that module imports this one

    findings += rank_findings(run)  # outside the gate: a CUDA-before-fork run has no steps
    return _order(findings)


# -- rules on a sweep ---------------------------------------------------------------------------


def _differs(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    keys = (set(a) | set(b)) - {"fit"}
    return {k for k in keys if a.get(k) != b.get(k)}


def _verdict(sweep: SweepResult) -> Finding:
    base, best = sweep.baseline, sweep.best
    if best is None:
        return Finding(
            "verdict",
            "Every run failed; nothing was measured.",
            "See the errors in the table.",
            severity="critical",
        )
    helped, flat, hurt = [], [], []
    for run in sweep.runs[1:]:
        if not run.ok or len(_differs(base.knobs, run.knobs)) != 1:
            continue
        c = compare(base, run)
        text = f"{run.label(base)} {c.speedup:.2f}x"
        (helped if c.verdict == "faster" else hurt if c.verdict == "slower" else flat).append(text)
    effects = "".join(
        f" {title}: {', '.join(items)}."
        for title, items in (("Helped", helped), ("Within noise", flat), ("Slower", hurt))
        if items
    )
    c = compare(base, best)
    if best is base or c.verdict != "faster":
        return Finding(
            "verdict",
            f"No run beat the baseline beyond noise (fastest: {best.label(base)}, {c})." + effects,
            "Keep the baseline configuration; the findings below say what limits it.",
            severity="info",
        )
    return Finding(
        "verdict",
        f"Best: {best.label(base)} at {best.samples_per_s:.1f} samples/s, {c}." + effects,
        f"Keep {best.label(base)}.",
        severity="info",
    )


def _compile_payback(sweep: SweepResult) -> list[Finding]:
    findings = []
    for run in sweep.runs:
        if not run.ok or run.knobs.get("compile") in (None, "off"):
            continue
        plain = next(
            (
                o
                for o in sweep.runs
                if o.ok
                and o.knobs.get("compile") in (None, "off")
                and _differs(o.knobs, run.knobs) == {"compile"}
            ),
            None,
        )
        if plain is None:
            continue
        step_plain, step_compiled = _step_wall(plain), _step_wall(run)
        cost = max(0.0, run.phases.get("compile", 0.0) - step_plain)
        c = compare(plain, run)
        evidence = (
            f"Compiling cost {cost:.1f} s (first compiled step); steady steps take "
            f"{_ms(step_compiled)} compiled against {_ms(step_plain)} without ({c})."
        )
        saving = step_plain - step_compiled
        if c.verdict != "faster" or saving <= 0:
            advice = (
                "Break-even: never. Compiled steps are not faster here, so compiling only adds "
                "start-up time on this model and hardware: leave --compile off."
            )
            findings.append(Finding("compile_payback", evidence, advice, "compile", "warn", "off"))
            continue
        steps = math.ceil(cost / saving)
        advice = (
            f"Break-even after {steps} steps ({steps * step_compiled:.0f} s of training): compile "
            f"pays off for longer runs than that, and costs time in shorter ones."
        )
        severity = "info" if steps <= COMPILE_PAYBACK_STEPS else "warn"
        findings.append(
            Finding("compile_payback", evidence, advice, "compile", severity, run.knobs["compile"])
        )
    return findings


def _workers_slow_the_model(sweep: SweepResult) -> list[Finding]:
    """batch_time growing with workers, among runs that differ only in workers."""
    groups: dict[str, list[RunResult]] = {}
    for run in sweep.runs:
        if run.ok and isinstance(run.knobs.get("workers"), int) and math.isfinite(run.batch_time):
            rest = {k: v for k, v in run.knobs.items() if k not in ("workers", "fit")}
            groups.setdefault(repr(sorted(rest.items())), []).append(run)
    findings = []
    for runs in groups.values():
        runs = sorted(runs, key=lambda r: r.knobs["workers"])
        few, many = runs[0], runs[-1]
        cores, threads = run_cores(many), _threads(many)
        grew = many.batch_time / few.batch_time - 1 if few.batch_time > 0 else 0.0
        w_few, w_many = few.knobs["workers"], many.knobs["workers"]
        if w_many == w_few or w_many + threads <= cores or grew < BATCH_TIME_GROWTH:
            continue
        evidence = (
            f"batch_time grows from {_ms(few.batch_time)} with workers={w_few} to "
            f"{_ms(many.batch_time)} with workers={w_many} (+{grew:.0%}): {w_many} worker(s) + "
            f"{threads} torch thread(s) share {cores} cores."
        )
        advice = (
            "The workers take cores from the model's compute. Keep the workers that pay off "
            "overall (see samples/s) or give torch fewer threads: "
            f"torch.set_num_threads({max(1, cores - w_many)})."
        )
        findings.append(
            Finding("oversubscribed", evidence, advice, "workers", "warn", max(1, cores - threads))
        )
    return findings


def diagnose_sweep(sweep: SweepResult) -> list[Finding]:
    """The sweep's verdict, what only a sweep shows, and what still limits its best run.

    First the ``verdict`` (best run, which single-knob changes helped beyond noise), then
    compile payback and workers slowing the model, notebook traps of failed runs, and the best
    run's own findings.
    """
    findings = _compile_payback(sweep) + _workers_slow_the_model(sweep)
    for run in sweep.runs:
        if not run.ok:
            findings += _notebook_traps(run)
    if sweep.best is not None:
        findings += diagnose(sweep.best)
    return [_verdict(sweep), *_order(unique_findings(findings))]


# -- the next experiment ------------------------------------------------------------------------


def current_value(run: RunResult, knob: str) -> Any:
    """The knob's value in this run: the knob when set, else what the run shows or the default."""
    if knob in run.knobs:
        return run.knobs[knob]
    inferred: dict[str, Any] = {
        "workers": run.loader_workers(),
        "batch_size": _batch(run),
        "preload": "off",
        "compile": "on" if run.phases.get("compile", 0) > 0 else "off",
        "persistent_workers": False,
        "pin_memory": False,
        "precision": "32-true",
        "matmul": "highest",
        "trainer.limit_val_batches": 1.0,
    }
    return inferred.get(knob)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _option_text(knob: str, *values: Any) -> str:
    text = ",".join(_value_text(v) for v in values)
    if knob.startswith("trainer."):
        return f"--trainer {knob.removeprefix('trainer.')}={text}"
    return f"--{KNOBS[knob].option} {text}"


def next_step(run: RunResult, tried: Iterable[tuple[str, Any]] = ()) -> Finding | None:
    """The first finding of the run with a knob value not yet tried, in the doctor's order."""
    done = set(tried)
    for finding in diagnose(run):
        if finding.knob is None or finding.value is None:
            continue
        if (
            finding.value == current_value(run, finding.knob)
            or (finding.knob, finding.value) in done
        ):
            continue
        return finding
    return None


def next_experiment(sweep: SweepResult) -> str:
    """The exact ``%%profile_train`` line to run next.

    It keeps the best run's knobs and sweeps the top finding's knob from its current value to
    the suggested one, so the new baseline is today's best and the change is measured against
    it. With nothing left to try, it repeats the best configuration three times to confirm it.
    """
    best = sweep.best or sweep.baseline
    base = {k: v for k, v in best.knobs.items() if k != "fit"}
    tried = {
        (k, v)
        for run in sweep.runs
        for k, v in run.knobs.items()
        if _differs(run.knobs, base) <= {k}
    }
    finding = next_step(best, tried)
    parts = ["%%profile_train"]
    if finding is not None:
        base.pop(finding.knob, None)
    trainer = {k: v for k, v in base.items() if k.startswith("trainer.")}
    parts += [_option_text(k, v) for k, v in base.items() if k in KNOBS]
    parts += [_option_text(k, v) for k, v in trainer.items()]
    if finding is not None:
        parts.append(_option_text(finding.knob, current_value(best, finding.knob), finding.value))
    if best.steps:
        parts.append(f"--steps {best.steps}")
    if finding is None or best.throughput_summary.relative_iqr > NOISY_IQR:
        parts.append("--repeat 3")
    return " ".join(parts)
