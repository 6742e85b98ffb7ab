"""Sweeps: run a training function once per knob combination and collect comparable results.

``speedlab.profile_train`` and ``%%profile_train`` build a ``SweepSpec`` with ``plan_sweep`` and
run it with ``run_sweep``, each with the live view of its front end. Every option is checked before anything runs, each
run is stored as it ends, and an interrupt keeps what was measured so far.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.launches import split_notes
from speedlab.analysis.predict import predict
from speedlab.analysis.steady_notes import steady_notes
from speedlab.analysis.utilisation import flops_notes
from speedlab.analysis.verdict import judge_sweep
from speedlab.measure.compat import trainer_classes
from speedlab.measure.devices import Device, device_for
from speedlab.measure.flops import peak_of
from speedlab.measure.handover import handover_time
from speedlab.results.knobs import (
    KNOBS,
    KnobError,
    KnobRefused,
    Knobs,
    as_list,
    check_number,
    option_name,
    sweep_plan,
)
from speedlab.results.prediction import Guess, Prediction
from speedlab.results.run import RunResult
from speedlab.results.stats import summarize
from speedlab.results.sweep import SweepResult
from speedlab.run.fit_record import FitRecord
from speedlab.run.forking import describe_rank_failure
from speedlab.run.in_force import ran_otherwise
from speedlab.run.intercept import Intercept, RunControls, RunInProgress
from speedlab.run.interrupts import held_interrupts
from speedlab.run.loaders import resolve_workers
from speedlab.run.precision import autocast_refusal
from speedlab.run.reaper import WorkerReaper
from speedlab.run.storing import SweepStore
from speedlab.run.tracebacks import print_user_traceback
from speedlab.run.watch import LiveView

LIBRARY_DEPRECATIONS = r"(lightning|pytorch_lightning)(\.|$)"
"""Modules whose deprecation warnings a profiled cell does not show: they are about Lightning's
own code, which the user cannot change."""


@dataclass(frozen=True)
class SweepSpec:
    """A checked sweep: the runs to make and how each one is controlled."""

    plan: list[Knobs]
    controls: RunControls
    repeat: int = 1
    name: str | None = None


def plan_sweep(
    knobs: Mapping[str, Any],
    *,
    trainer: Mapping[str, Any] | None = None,
    controls: RunControls | None = None,
    repeat: int = 1,
    name: str | None = None,
) -> SweepSpec:
    """Check every option and build the cartesian product of the knob lists (baseline first).

    ``controls`` (checked when built) say how long each run trains; default: as the cell says.
    """
    unknown = set(knobs) - set(KNOBS)
    if unknown:
        bad = sorted(unknown)[0]
        raise KnobError(option_name(bad), knobs[bad], "a known knob: " + ", ".join(KNOBS))
    given = {k: as_list(v) for k, v in knobs.items() if v is not None}
    controls = controls or RunControls()
    extra = {k: as_list(v) for k, v in _trainer_arguments(trainer, controls).items()}
    repeat = check_number("repeat", repeat, int, 1, "an integer >= 1")
    if name is not None and not isinstance(name, str):
        raise KnobError("name", name, "a text label", given=f"name={name!r}")
    return SweepSpec(sweep_plan(given, extra), controls, repeat, name)


def _trainer_arguments(
    trainer: Mapping[str, Any] | None, controls: RunControls
) -> Mapping[str, Any]:
    """``trainer``, checked: arguments of Lightning's Trainer, none that a knob or a run control
    sets (the knob's or control's value would silently win over the one given here)."""
    if trainer is None:
        return {}
    if not isinstance(trainer, Mapping):
        allowed = "a dict of Trainer arguments, each to a value or a list of values"
        raise KnobError("trainer", trainer, allowed, given=f"trainer={trainer!r}")
    accepted = {
        name
        for cls in trainer_classes()
        for name in inspect.signature(cls.__init__).parameters
        if name != "self"
    }
    controlled = {"max_steps": ("steps", controls.steps), "max_time": ("time", controls.time)}
    for key, values in trainer.items():
        shown = f"{key}={','.join(map(str, as_list(values)))}"
        given = f"--trainer {shown}"  # the magic's words, which the knobs' refusals below use
        if key in KNOBS:
            allowed = f"a Trainer argument no knob sets: use --{option_name(key)}"
            raise KnobError("trainer", shown, allowed, given)
        if key not in accepted:
            raise KnobError("trainer", shown, "an argument of Lightning's Trainer as KEY", given)
        control, value = controlled.get(key, ("", None))
        if value is not None:
            allowed = f"{key} or --{control} {value}, not both: --{control} sets {key}"
            raise KnobError("trainer", shown, allowed, given)
    return trainer


def run_once(
    train_fn: Callable[[], Any],
    knobs: Knobs,
    controls: RunControls,
    *,
    view: LiveView | None = None,
    fingerprint_data: bool = False,
) -> tuple[list[RunResult], BaseException | None]:
    """Run the training function once with these knobs: one RunResult per ``fit`` it made.

    ``fingerprint_data``: each result's workload also holds its training data's fingerprint,
    read after the fit (``Intercept``), as grading needs.
    """
    error: BaseException | None = None
    session = Intercept(knobs, controls, fingerprint_data=fingerprint_data)
    reaper = WorkerReaper()
    try:
        with session, reaper:  # the reaper's patch only while this run holds the patches
            if view is not None:
                view.watch(session)
            try:
                with warnings.catch_warnings():
                    _quiet_library_deprecations()
                    train_fn()
            except (Exception, KeyboardInterrupt, SystemExit) as err:  # exit(): the cell's error
                error = err
            finally:
                if view is not None:
                    view.unwatch()
    except (Exception, KeyboardInterrupt) as err:  # applying the knobs failed: nothing ran
        error = err
    with held_interrupts() as held:  # what the run measured is assembled whole
        reaped = reaper.reap()
        several = len(session.fits) > 1
        # After the fit and its workers: the machine's hand-over as the run ends, for
        # predictions from it (one reading stands for its moment only: handover's docstring).
        handover = handover_time() if session.fits else None
        results = [
            _assemble(fit, knobs, session, reaped, handover, number=i + 1 if several else None)
            for i, fit in enumerate(session.fits)
        ]
        if not results:
            message = (
                describe_error(error)
                if error
                else ("The cell never called trainer.fit(...): there was no training to measure.")
            )
            results.append(RunResult(knobs=knobs, error=message, notes=session.notes + reaped))
        elif error is not None and all(r.error is None for r in results):
            results[-1] = replace(results[-1], error=describe_error(error))
    if held.interrupted and error is None:  # after the run ended whole: the sweep stops here
        error = KeyboardInterrupt()
    return results, error


def _peak(device: Device, measured: RunResult, taken: dict[str, Any]) -> dict[str, Any]:
    """The device's peak FLOP/s in the run's precision and matmul level, and its source, only
    where the run's FLOPs were counted: the one the probe took before the fit trained (which
    the live view's MFU used), else (ranks' results) read now by the same rule."""
    if not measured.flops_per_step:
        return {}
    return taken or peak_of(device, measured.workload)


def _assemble(
    fit: FitRecord,
    knobs: Knobs,
    session: Intercept,
    reaped: list[str],
    handover: float | None,
    number: int | None,
) -> RunResult:
    """One fit's result, built once: what the probe measured, the knobs asked and in force,
    the notes of each part, and the doctor's findings."""
    measured = fit.probe.result() if fit.probe.ran else RunResult()
    device = device_for(measured.device)
    workload = measured.workload | fit.workload() | {"math": device.math()}
    workload["handover"] = handover
    ran = ran_otherwise(knobs, fit, measured)
    knob_notes, changes = _matmul_knob(knobs, session, ran, measured.workload.get("precision"))
    if changes is not None:
        workload["matmul_changes"] = changes
    error = measured.error
    if fit.exception is not None:  # the ranks' own account of a failure comes first
        error = error or describe_error(fit.exception)
    if error is not None:  # a rank's account holds its error's whole text
        error = autocast_refusal(error) or error
    elif fit.probe.ran and not measured.steps and not fit.stopped:
        error = _untrained(fit)
    result = replace(
        measured,
        knobs=knobs,
        ran_otherwise=ran,
        fit=number,
        notes=knob_notes + fit.notes + measured.notes + reaped + _stopped(fit, measured),
        phases=measured.phases | {"preload": fit.preload_s},
        workload=workload,
        flops=measured.flops | _peak(device, measured, fit.probe.peak),
        error=error,
    )
    return replace(
        result,
        notes=result.notes + steady_notes(result) + flops_notes(result) + split_notes(result),
        diagnosis=diagnose(result, lint_findings=_lint(fit.model)),
    )


_NO_FLOAT32 = ("64-true", "16-true", "bf16-true")
"""Precisions whose whole model computes in another type than float32: no float32 matmul."""


def _matmul_knob(
    knobs: Knobs, session: Intercept, ran: dict[str, Any], precision: str | None
) -> tuple[list[str], bool | None]:
    """The matmul knob's note on the fit as it ran, and whether the knob changed its float32
    matmuls: not where the cell set its own level, nor where the model has none."""
    if "matmul" in ran:
        return [
            f"matmul={knobs.matmul} did not act: float32 matmuls ran at {ran['matmul']!r}, which "
            "the cell set itself (torch.set_float32_matmul_precision) after speedlab set the "
            "knob's level. Leave the setting to the knob while it is compared."
        ], False
    if knobs.matmul is not None and precision in _NO_FLOAT32:
        return [
            f"matmul={knobs.matmul} changed nothing: the model trains in {precision}, which has "
            "no float32 matmuls for it to act on."
        ], False
    return session.notes, session.matmul_changes


def _untrained(fit: FitRecord) -> str:
    """Why a fit that ended without an error trained no step."""
    if fit.prebuilt and fit.trainer.global_step > 0:
        return (
            "The fit trained no steps: its Trainer, built before the run, had already trained "
            "to its max_steps or max_epochs in an earlier fit, and a Trainer trains that far "
            "once. Build the Trainer in the profiled cell, so that each run gets a new one."
        )
    return (
        "The fit trained no steps: the Trainer's limits (max_steps, max_epochs, "
        "limit_train_batches) or an empty training loader left nothing to train."
    )


STOPPED = "Stopped on request after"
"""How the note of a run stopped on request begins (``stopped_on_request``)."""


def _stopped(fit: FitRecord, measured: RunResult) -> list[str]:
    """The note of a run stopped on request (the panel's Stop) before it ended on its own."""
    if not fit.stopped:
        return []
    return [f"{STOPPED} {measured.steps} steps; what was measured is kept."]


def stopped_on_request(run: RunResult) -> bool:
    """Whether a stop asked for while the run trained ended it (its note says so)."""
    return any(note.startswith(STOPPED) for note in run.notes)


def _quiet_library_deprecations() -> None:
    """Keep Lightning's warnings about its own use of deprecated APIs (Lightning 2.6 warns
    on torch 2.13 at every step) out of the cell's output; the user's own warnings still show."""
    for category in (DeprecationWarning, FutureWarning):
        warnings.filterwarnings("ignore", category=category, module=LIBRARY_DEPRECATIONS)


def _lint(model: Any) -> list[Any]:
    """The lint of the fitted model, or nothing when its source cannot be read."""
    from speedlab.analysis.linter import LintError, lint

    if model is None:
        return []
    try:
        return lint(model)
    except (LintError, TypeError):
        return []


def describe_error(err: BaseException) -> str:
    """A run's error as its result records it: an op autocast refused explained in one line."""
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return (
        autocast_refusal(str(err))
        or describe_rank_failure(err)
        or f"{type(err).__name__}: {err}".strip()
    )


def _one_line(err: BaseException) -> str | None:
    """What a sweep shows of ``err`` instead of its traceback, where one line says it all: a
    knob refused before training, another run in progress, an op autocast refused; None for
    any other error."""
    if isinstance(err, (KnobRefused, RunInProgress)):
        return str(err)
    return autocast_refusal(str(err))


def merge_replicates(replicates: list[RunResult]) -> RunResult:
    """One result for ``--repeat`` runs: the median run's records, throughput over all of them."""
    if len(replicates) == 1:
        return replicates[0]
    done = [r for r in replicates if r.ok] or replicates
    rates = [r.samples_per_s for r in done]
    median = summarize(rates).median
    middle = min(
        done,
        key=lambda r: (
            abs(r.samples_per_s - median) if r.samples_per_s == r.samples_per_s else 1e300
        ),
    )
    notes = list(dict.fromkeys(n for r in replicates for n in r.notes))
    errors = [r.error for r in replicates if r.error]
    return replace(
        middle,
        error=errors[0] if len(errors) == len(replicates) else None,
        notes=notes
        + ([f"{len(errors)} of {len(replicates)} repeats failed: {errors[0]}"] if errors else []),
        replicates=replicates,
    )


def cell_hash(source: str | None) -> str | None:
    return hashlib.sha256(source.encode()).hexdigest()[:16] if source is not None else None


Ask = Callable[[str], Guess | None]
"""Asks the learner's guess for the run of this label before it runs; None: no guess."""


@dataclass(frozen=True)
class Before:
    """What was said of a run before it ran: speedlab's prediction for each fit of the
    baseline (by fit number) and the learner's guess."""

    predictions: dict[int | None, Prediction]
    guess: Guess | None

    def kept(self, result: RunResult) -> RunResult:
        """The result with what was said of it before it ran."""
        return replace(result, prediction=self.predictions.get(result.fit), guess=self.guess)


def before_run(
    baseline: Sequence[RunResult],
    knobs: Knobs,
    *,
    ask: Ask | None,
    view: LiveView,
    latest: Sequence[RunResult] = (),
) -> Before:
    """Before a run after the baseline: the learner's guess first (so speedlab's figure cannot
    sway it), then speedlab's prediction from each of the baseline's fits, shown by ``view``,
    with the hand-over measured as the ``latest`` run ended where it has one (the machine's
    nearest to the run predicted), else the baseline's."""
    label = RunResult(knobs=knobs).label(baseline[0]) if baseline else "run"
    guess = ask(label) if ask is not None else None
    if knobs.workers == "auto":
        knobs = replace(knobs, workers=resolve_workers("auto", knobs.devices or 1)[0])
    handover = next((r.workload["handover"] for r in latest if "handover" in r.workload), None)
    predictions = {base.fit: predict(base, knobs, handover=handover) for base in baseline}
    view.predicted(label, next(iter(predictions.values()), None), guess)
    return Before(predictions, guess)


def run_sweep(
    train_fn: Callable[[], Any],
    spec: SweepSpec,
    *,
    view: LiveView | None = None,
    store: str | Path | bool | None = None,
    source: str | None = None,
    show_error: Callable[[BaseException], None] = print_user_traceback,
    ask: Ask | None = None,
) -> SweepResult:
    """Run every combination ``spec.repeat`` times; store each run as it ends.

    ``view`` is told of each run (a ``LiveView`` shows nothing); ``store`` is the run store's
    path, ``None`` for the default, ``False`` for none. Each run after the baseline is
    predicted from the baseline's first measurement before it runs, after ``ask`` (where
    given) took the learner's guess for it.
    """
    kept = SweepStore(store, name=spec.name, cell_hash=cell_hash(source))
    view = view or LiveView()
    replicates: list[list[RunResult]] = [[] for _ in spec.plan]
    said: dict[int, Before] = {}
    shown: set[str] = set()
    interrupted = False
    try:
        view.start_sweep(spec)
        # Repeats go round the plan (A B A B, not A A B B): drift over time, such as a machine
        # warming up or another job starting, then lands on every configuration alike.
        for attempt in range(spec.repeat):
            for i, knobs in enumerate(spec.plan):
                if i > 0 and i not in said:
                    try:
                        said[i] = before_run(
                            replicates[0], knobs, ask=ask, view=view, latest=replicates[i - 1]
                        )
                    except KeyboardInterrupt:  # while the learner was asked: as in a run
                        interrupted = True
                        break
                view.start_run(knobs, attempt)
                results, error = run_once(train_fn, knobs, spec.controls, view=view)
                if i in said:
                    results = [said[i].kept(result) for result in results]
                replicates[i] += results
                with held_interrupts() as held:  # a run measured whole is stored first
                    for result in results:
                        kept.add(result)
                interrupted = held.interrupted
                for result in results:
                    view.end_run(result)
                failed = error is not None and not isinstance(error, KeyboardInterrupt)
                if failed and describe_error(error) not in shown:
                    shown.add(describe_error(error))  # the same failure in every run: shown once
                    if (line := _one_line(error)) is not None:
                        print(line, file=sys.stderr)
                    else:
                        show_error(error)
                if interrupted or isinstance(error, KeyboardInterrupt):
                    interrupted = True
                    break
            if interrupted:
                break
        groups = [group for plan in replicates for group in _by_fit(plan)]
        notes = (
            [
                f"Interrupted: the sweep stopped after {len(groups)} run(s); what was measured is kept."
            ]
            if interrupted
            else []
        )
        with held_interrupts():  # what was measured is judged and kept whole
            sweep = kept.finish(_judged(groups, name=spec.name, notes=notes + kept.notes), groups)
    finally:
        kept.close()
    view.end_sweep(sweep)
    return sweep


def sweep_from_runs(
    results: Sequence[RunResult], *, name: str | None = None, notes: Sequence[str] = ()
) -> SweepResult:
    """The judged sweep of these runs, in the order they ran: the repeats of one configuration
    (and one fit) merged, the first configuration the baseline."""
    groups: dict[str, list[RunResult]] = {}
    for result in results:
        groups.setdefault(repr(sorted(result.settings().items())), []).append(result)
    return _judged(list(groups.values()), name=name, notes=notes)


def _judged(
    groups: Sequence[list[RunResult]], *, name: str | None, notes: Sequence[str]
) -> SweepResult:
    return judge_sweep([merge_replicates(group) for group in groups], name=name, notes=notes)


def _by_fit(replicates: list[RunResult]) -> list[list[RunResult]]:
    """The repeats of one combination, apart for each fit of a multi-fit cell."""
    groups: dict[int | None, list[RunResult]] = {}
    for result in replicates:
        groups.setdefault(result.fit, []).append(result)
    return list(groups.values())
