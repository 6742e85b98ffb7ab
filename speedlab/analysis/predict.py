"""speedlab's prediction of a run's speedup, made before it runs, from its baseline's split.

The baseline measured what a step is made of: the wait for data (data_time), the compute
(batch_time), the time one loading process takes to make a batch (``making``: the wait itself
without workers, the workers' stamps with them), how busy that keeps a core, and the cores the
run had. A knob changes some of those parts, and the step is computed again from them:

- without workers the main process loads between steps: step = batch_time + making;
- with ``w`` workers loading runs beside the step: step = max(batch_time + hand-over,
  making / w), the hand-over being this machine's cost of taking a ready batch from a worker;
  and the compute no less than the CPU the step needs (the model's compute and the loaders'
  busy time) over the cores, where the workers compete with torch's threads for them; on a
  CPU whose cores torch's threads fill, working workers hold each operation up (``STRAGGLE``).
  Where that contention may or may not come, the prediction is a range.

Workers change ``w``; ``--preload ram`` takes reading and decoding out of ``making`` (what
stays, the augmentation and collation, is at most its busy part; where the dataset has no
load/transform split its whole samples are cached, and only the collation stays; of tensors in
memory, only the indexing of each row leaves), ``shm`` takes the storage wait out;
``--batch-size`` scales the loading per sample and the compute somewhere between per sample
and per step. A knob that cannot act here (pinned memory without a GPU, a matmul level
this hardware ignores, persistent workers in the steady steps) predicts 1.0x. Where the split
cannot say what a knob does (compile, precision, more devices, Trainer arguments), there is no
number, and the reason says why.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from speedlab.analysis.compare import other_processes_cores, run_cores, run_cpu
from speedlab.analysis.data import IN_MEMORY_DATASETS, loader_busy
from speedlab.analysis.findings import batch_size, device_name, differs, torch_threads
from speedlab.measure.devices import device_for
from speedlab.results.findings import Finding
from speedlab.results.knobs import KNOBS, Knobs
from speedlab.results.prediction import FAR_OFF, Prediction
from speedlab.results.run import RunResult
from speedlab.results.table import fmt_ms

BUSY_IDLE = 0.2
"""Core share below which a loading process is said to wait (on storage) rather than work."""
STRAGGLE = 2.0
"""How much a CPU step's compute grows when workers that work (not wait) share the cores with
torch's threads, where those threads fill every core: torch's threads wait for each other at
the end of every operation, so the one whose core a worker takes holds up each operation (the
image lab's batch_time 22.9 ms alone, 44.8 and 48.0 ms beside 1 and 2 decoding workers, on 2
cores)."""
UNPREDICTABLE = ("compile", "precision", "devices", "strategy")
"""Knobs the baseline's split cannot predict; their ``KnobSpec.predicts`` says why."""


@dataclass(frozen=True)
class Split:
    """The baseline's step as a prediction reads it (times in seconds, per step)."""

    batch_time: float
    making: float  # one loading process's time to make one batch
    busy: float  # the core share a loading process keeps busy while it makes a batch
    model_cpu: float  # core-seconds of the model's compute in one step
    cores: float  # CPU the run could use, less what other processes took
    workers: int
    batch: int
    handover: float  # the training process's wait to take a ready batch from a worker
    straggle: float  # the compute's factor beside working workers (``STRAGGLE``), or 1.0

    @property
    def alone(self) -> float:
        """The compute of a step with no working worker beside it."""
        return self.batch_time / (self.straggle if self.workers else 1.0)

    def step(self, workers: int, *, contended: bool = True) -> tuple[float, float]:
        """(batch_time, data_time) of a step with ``workers`` loading processes; not
        ``contended``: as if the workers took no CPU from the model (the best case)."""
        alone = self.alone
        if workers == 0:
            return alone, self.making
        if not contended:
            return alone, max(self.handover, self.making / workers - alone)
        demand = (self.model_cpu + self.making * self.busy) / self.cores
        compute = max(alone * self.straggle, demand)
        return compute, max(self.handover, self.making / workers - compute)


def _split(base: RunResult, handover: float | None = None) -> Split | str:
    """The baseline's split, or why it cannot give one; ``handover`` in place of the one
    measured as the baseline ended, where given."""
    if not base.ok or not base.steady.steps:
        return "the baseline measured no steady steps to predict from"
    data, compute = base.data_time, base.batch_time
    if not (math.isfinite(data) and math.isfinite(compute)):
        return "the baseline's step times are not numbers"
    workers = base.loader_workers()
    if workers == 0:
        making = data
    else:
        stamps = base.records.get("pipeline") or {}
        made = [e - s for s, e in zip(stamps.get("start", []), stamps.get("end", []))]
        if not made:
            return "the baseline's workers left no stamps of how long a batch takes to make"
        making = statistics.fmean(made)
    busy = loader_busy(base)
    cores = max(1.0, run_cpu(base) - other_processes_cores(base))
    threads = min(torch_threads(base), cores) if base.device == "cpu" else 1.0
    busy = 1.0 if busy is None else busy
    fill = base.device == "cpu" and torch_threads(base) >= run_cores(base)
    straggle = STRAGGLE if fill and busy >= BUSY_IDLE else 1.0
    model_cpu = compute * threads
    main = base.system.main_cpu_percent
    if main is not None and workers == 0:
        # The model's compute is what the main process used beyond its loading; torch's threads
        # may not all have been busy (a step of Python, a small model).
        model_cpu = min(model_cpu, max(compute, main / 100 * base.step_time - data * busy))
    return Split(
        compute,
        making,
        busy,
        model_cpu,
        cores,
        workers,
        batch_size(base),
        float(base.workload.get("handover") or 0.0) if handover is None else handover,
        straggle,
    )


def _matmul_inert(base: RunResult, level: str) -> str | None:
    """What ``--matmul level`` does on the baseline's device, where it changes nothing; None
    where it changes something, or where this machine has no such device to ask (a run
    recorded on another machine)."""
    device = device_for(base.device)
    if not device.is_available():
        return None
    text, changes = device.matmul(level)
    return None if changes else text


def _samples_per_s(split: Split, workers: int, contended: bool) -> float:
    compute, data = split.step(workers, contended=contended)
    return split.batch / (compute + data)


def predict(base: RunResult, knobs: Knobs, *, handover: float | None = None) -> Prediction:
    """speedlab's prediction of the speedup of a run with ``knobs`` over ``base``, from the
    baseline's measured split (module docstring) and the hand-over of a batch from a worker
    on its machine: ``handover`` where given (the latest reading, before the run predicted),
    else the one measured as the baseline ended (``workload["handover"]``,
    speedlab.measure.handover); ``speedup`` None, with the reason, where the split cannot
    predict it. ``knobs`` with ``workers`` resolved (not ``auto``)."""
    split = _split(base, handover)
    if isinstance(split, str):
        return Prediction(None, split)
    changed = sorted(differs(base.knobs, knobs))
    if knobs.trainer != base.knobs.trainer:
        return Prediction(
            None,
            "Trainer arguments change the training loop itself: the split of a step cannot say how",
        )
    for knob in changed:
        if knob in UNPREDICTABLE:
            why = KNOBS[knob].predicts.removeprefix("none: ")
            return Prediction(None, f"{knob}={knobs[knob]}: {why}")
    if knobs.workers == "auto":
        return Prediction(None, "workers=auto: the count is chosen when the run starts")
    reasons: list[str] = []
    inert: list[str] = []
    restart_gain, restart_note = 1.0, ""
    low = high = point = split
    workers = base.loader_workers() if knobs.workers is None else int(knobs.workers)
    for knob in changed:
        value = knobs[knob]
        if knob == "pin_memory":
            if not device_for(base.device).pins_memory:
                inert.append(f"pin_memory={_on(value)}: pinning only speeds copies to a CUDA GPU")
            else:
                return Prediction(None, _pinned(base, value))
        elif knob == "persistent_workers":
            restarts = _restarts(base, workers, value)
            if restarts is None:
                inert.append(
                    f"persistent_workers={_on(value)} only changes the start of each epoch, "
                    "which the steady steps leave out"
                )
            else:
                restart_gain = restarts
                restart_note = (
                    "persistent_workers=on: each epoch's first batch is left out of the steady "
                    "steps, but the rounds after a restart still wait for the new workers: up to "
                    f"the typical step's pace ({restarts:.1f}x)"
                )
        elif knob == "matmul":
            said = _matmul_inert(base, value)
            if said is None:
                return Prediction(
                    None,
                    f"matmul={value}: the gain depends on how much of batch_time is float32 "
                    "matmuls, which the split of a step does not show",
                )
            inert.append(said.rstrip("."))
        elif knob == "preload" and value in ("ram", "shm") and _off(base.ran.get("preload")):
            reason, stays = _preload(base, value, split)
            low, point, high = _spread(
                (low, point, high),
                lambda s, share: replace(s, making=s.making * s.busy * share),
                point=stays,
            )
            reasons.append(reason)
        elif knob == "batch_size":
            low, point, high = _spread(
                (low, point, high), lambda s, share, size=value: _batch(s, size, share)
            )
            reasons.append(
                f"batch_size={value}: loading grows with the samples; the compute between "
                "per sample (the same samples/s) and per step (fixed costs spread thinner)"
            )
        elif knob == "workers":
            reasons.append(_workers_reason(split, workers))
        else:
            return Prediction(
                None,
                f"{knob}={value}: the baseline ran with {knob}={base.ran.get(knob)}, whose split "
                "does not show what changing it back costs",
            )
    if not reasons and restart_note:
        return Prediction(
            1.0,
            "; ".join([restart_note, *inert]),
            1.0,
            restart_gain,
            base.data_time,
            base.batch_time,
        )
    reasons += [restart_note] if restart_note else []
    if not reasons:
        said = "; ".join(inert) or "the same configuration as the baseline"
        return Prediction(
            1.0, f"{said}: nothing changes, 1.0x", 1.0, 1.0, base.data_time, base.batch_time
        )
    before = base.samples_per_s
    speedups = [
        _samples_per_s(s, workers, contended) / before
        for s, contended in ((low, True), (point, True), (high, False))
    ]
    speedups[2] *= restart_gain
    compute, data = point.step(workers)
    speedup = speedups[1]
    said = "; ".join(reasons + inert)
    result = (
        f"so the step should take about {fmt_ms(compute + data)} against "
        f"{fmt_ms(base.step_time)}: about {speedup:.1f}x"
    )
    return Prediction(speedup, f"{said}, {result}", min(speedups), max(speedups), data, compute)


def _spread(
    splits: tuple[Split, Split, Split],
    change: Callable[[Split, float], Split],
    point: float = 0.5,
) -> tuple[Split, Split, Split]:
    """The (low, point, high) splits with a knob's ``change``, which keeps all of its cost on
    the low end, ``point`` of it (half unless said) at the point and none on the high end."""
    low, middle, high = splits
    return change(low, 1.0), change(middle, point), change(high, 0.0)


def _preload(base: RunResult, value: str, split: Split) -> tuple[str, float]:
    """What ``--preload value`` takes out of making a batch and what may stay; and the share of
    the loader's busy part that stays at the point (``_spread``)."""
    making, kept = fmt_ms(split.making), fmt_ms(split.making * split.busy)
    dataset = base.workload.get("dataset")
    if value == "ram" and base.workload.get("ram_cache") == "items":
        if dataset in IN_MEMORY_DATASETS:
            return (
                f"preload=ram caches the rows of {dataset}, tensors in memory already: only "
                f"indexing each row leaves the {making} it takes to make a batch; collation "
                f"stays, at most its busy part ({kept})"
            ), 0.5
        return (
            f"preload=ram caches whole samples ({dataset} has no load/transform split): "
            f"reading, decoding and any augmentation leave the {making} it takes to make a "
            f"batch; only collation stays, at most its busy part ({kept}) and likely little of it"
        ), 0.0
    gone = "reading and decoding" if value == "ram" else "the storage wait"
    stays = "augmentation, collation" if value == "ram" else "decoding, the storage's own CPU"
    return (
        f"preload={value} takes {gone} out of the {making} it takes to make a batch; at most "
        f"its busy part ({kept}: {stays}) stays"
    ), 0.5


def _on(value: object) -> str:
    return "on" if value else "off"


def _restarts(base: RunResult, workers: int, value: object) -> float | None:
    """What keeping the workers may gain in the steady steps, at most: the baseline's steps at
    the typical (median) step's pace, where its workers restarted within them (several epochs,
    not persistent); None where the knob cannot change the steady steps."""
    if not (workers and value) or base.ran.get("persistent_workers"):
        return None
    epochs = {base.records["epoch"][i] for i in base.steady.steps}
    typical = base.steady.typical_step
    if len(epochs) < 2 or not typical > 0:
        return None
    return max(1.0, base.step_time / typical)


def _off(value: object) -> bool:
    return value in (None, "off")


def _pinned(base: RunResult, value: object) -> str:
    copy = base.copy_time
    if copy is None:
        return (
            f"pin_memory={_on(value)}: the baseline's timeline did not show the copy to the "
            f"{device_name(base)}, so its share of the step is unknown"
        )
    return (
        f"pin_memory={_on(value)}: the copy takes {fmt_ms(copy)} of the step; how much of it "
        "pinning saves, and what pinning costs the loader, the split does not show"
    )


def _batch(split: Split, size: int, per_sample: float) -> Split:
    """The split at ``size`` samples a batch: loading per sample, ``per_sample`` of the compute
    per sample and the rest per step."""
    scale = size / split.batch
    compute = per_sample * scale + (1 - per_sample)
    return replace(
        split,
        batch_time=split.batch_time * compute,
        model_cpu=split.model_cpu * compute,
        making=split.making * scale,
        batch=size,
    )


def _workers_reason(split: Split, workers: int) -> str:
    """What workers do to the step, in words."""
    if workers == 0:
        return (
            f"workers=0 loads in the main process between steps: each step waits the "
            f"{fmt_ms(split.making)} it takes to make a batch"
        )
    what = "waiting on storage" if split.busy < BUSY_IDLE else f"{split.busy:.0%} busy"
    spread = split.making / workers
    compute, _ = split.step(workers)
    head = (
        f"workers={workers}: making a batch ({fmt_ms(split.making)}, the loader {what}) spread "
        f"over {workers} workers takes {fmt_ms(spread)} a batch"
    )
    if compute > split.alone * 1.05 and split.straggle > 1:
        return (
            f"{head}, but torch's threads fill the cores and wait for each other after every "
            f"operation: a worker working beside them holds each one up, so the step computes "
            f"in up to {fmt_ms(compute)} (alone {fmt_ms(split.alone)})"
        )
    if compute > split.alone * 1.05:
        return (
            f"{head}, but the model's compute and the loading need more CPU than the "
            f"{split.cores:.1f} free cores give: the step computes in about {fmt_ms(compute)}"
        )
    relation = "under" if spread <= split.batch_time else "over"
    return f"{head}, {relation} the {fmt_ms(split.batch_time)} of compute"


def prediction_off(run: RunResult) -> float | None:
    """How far a run's measured speedup lies outside speedlab's predicted range, relative to
    the nearer end (0.0 inside; ``Prediction.off_by``). Where the comparison could not tell the
    run from its baseline (within noise, too few), 1.0x is as likely as the measured figure,
    and the nearer of the two counts. None without a prediction or a measurement."""
    p = run.prediction
    if p is None:
        return None
    off = p.off_by(run.speedup)
    undecided = run.comparison is not None and not run.comparison.decided
    if off is None or not undecided:
        return off
    return min(off, p.off_by(1.0) or 0.0)


def prediction_gap(run: RunResult) -> str | None:
    """Why a run's measured speedup lies far from speedlab's prediction (``FAR_OFF`` outside
    its range), from the part of the step that came out otherwise than predicted: ``predicted
    about 3.0x, measured 2.10x: batch_time 14.0 ms where 10.0 ms was predicted: ...``. None where
    the prediction held or none was made."""
    p, measured, off = run.prediction, run.speedup, prediction_off(run)
    if p is None or p.data_time is None or p.batch_time is None or off is None or off <= FAR_OFF:
        return None
    parts = [
        ("batch_time", run.batch_time, p.batch_time),
        ("data_time", run.data_time, p.data_time),
    ]
    name, got, expected = max(parts, key=lambda part: abs(part[1] - part[2]))
    head = (
        f"predicted {p.text()}, measured {measured:.2f}x: {name} {fmt_ms(got)} where "
        f"{fmt_ms(expected)} was predicted"
    )
    return f"{head}: {_cause(run, name, got > expected)}."


def _cause(run: RunResult, part: str, longer: bool) -> str:
    """The likely cause of a part of the step coming out longer (or shorter) than predicted."""
    workers, cores = run.loader_workers(), run_cpu(run)
    if not longer:
        return (
            f"the baseline's {part} was longer than this configuration's steady rate (a slow "
            "start, or the page cache warming up)"
        )
    if part == "batch_time" and workers and workers + torch_threads(run) > cores:
        return f"the workers' loading competed with the model for {cores:g} cores"
    if part == "batch_time":
        return "the compute itself took longer than in the baseline (other work on the machine?)"
    if workers:
        return (
            "the workers made batches more slowly than the baseline's loading suggested (cores "
            "taken by the model, or storage shared by the workers)"
        )
    return "loading took longer than in the baseline (other work on the machine?)"


def predicted_text(run: RunResult) -> str | None:
    """speedlab's prediction of the run in a few words (``Prediction.text``); None without one."""
    return run.prediction.text() if run.prediction is not None else None


def guess_text(run: RunResult) -> str | None:
    """The learner's guess and whether it held (``faster, right``); None without one."""
    if run.guess is None:
        return None
    decided = run.comparison.decided if run.comparison is not None else False
    held = run.guess.right(run.speedup, decided)
    return run.guess.text() + ("" if held is None else ", right" if held else ", wrong")


def prediction_said(run: RunResult) -> str | None:
    """What became of the predictions of a run, in a sentence or two: speedlab's held, was far
    off and why (``prediction_gap``), or why none was made; then the learner's guess, where
    one was given. None for a run without either (the baseline)."""
    p, said = run.prediction, []
    if p is not None and not p.made:
        said.append(f"No prediction: {p.reason}.")
    elif p is not None and (gap := prediction_gap(run)) is not None:
        said.append(gap[0].upper() + gap[1:])
    elif p is not None:
        held = "" if run.speedup is None else f", measured {run.speedup:.2f}x"
        said.append(f"Predicted {p.text()}{held}.")
    if (guess := guess_text(run)) is not None:
        said.append(f"Your guess: {guess}.")
    return " ".join(said) or None


def with_prediction(run: RunResult, finding: Finding) -> Finding:
    """``finding`` with speedlab's prediction of ``run`` with the knob it suggests, where it
    suggests one the split can predict (``Finding.predicted``, which its headline names)."""
    if finding.knob not in KNOBS or finding.value is None:
        return finding
    knobs = Knobs.from_dict(run.knobs.as_dict() | {finding.knob: finding.value})
    p = predict(run, knobs)
    return replace(finding, predicted=p.speedup) if p.made else finding
