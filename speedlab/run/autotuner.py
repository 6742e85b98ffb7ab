"""Autotune: from the baseline, try one knob at a time in the doctor's order; keep what helps.

Each step asks the doctor what limits the current best run, measures that run's knobs with
the doctor's suggested change, and keeps the change when ``compare`` calls it faster beyond
noise, or when it asks for fewer DataLoader workers and is within noise (see ``keeps``). A
change that looks better but is within noise is measured again (both sides) before it is
judged. The search stops when the doctor has nothing left to try, after ``MAX_TRIALS``
trials, or when another run would not fit in the budget.

Runs go through ``speedlab.run.sweep`` like any sweep, so each is stored and shown in the view
given, as usual.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from time import perf_counter
from typing import Any

from speedlab.analysis.compare import MIN_EFFECT, compare
from speedlab.analysis.doctor import diagnose
from speedlab.analysis.payback import UP_FRONT, pays_back
from speedlab.analysis.verdict import judge_sweep
from speedlab.results.comparison import Comparison
from speedlab.results.findings import Finding
from speedlab.results.knobs import KnobError, as_list, check_number, option_name
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.run.intercept import RunControls
from speedlab.run.next_step import current_value, next_step
from speedlab.run.sweep import merge_replicates, plan_sweep, run_sweep
from speedlab.run.watch import LiveView

MAX_TRIALS = 10
"""Most knob changes one autotune tries."""
CLOSE_REPEATS = 2
"""Extra runs of each side when a change looks better but is within noise."""
AS_FAST = "as fast with fewer workers"
"""Why a change within noise is kept (see ``keeps``)."""
COMPILE_MIN_BUDGET_S = 120.0
"""Budget left below which ``compile`` is not tried: compiling alone can take a minute on a CPU,
and a run's duration before it gives no estimate of that."""


class _Search:
    """Measures configurations of one cell and keeps time against the budget."""

    def __init__(
        self,
        train_fn: Callable[[], Any],
        *,
        budget_s: float | None,
        controls: RunControls,
        view: LiveView | None,
        store: str | Path | bool | None,
        name: str,
    ) -> None:
        self.train_fn, self.budget_s, self.controls = train_fn, budget_s, controls
        self.view, self.store, self.name = view, store, name
        self.start = perf_counter()
        self.run_seconds: list[float] = []

    def measure(self, knobs: dict[str, Any], repeat: int) -> RunResult:
        """Run the cell ``repeat`` times with these knobs; one merged RunResult."""
        plain = {k: v for k, v in knobs.items() if not k.startswith("trainer.")}
        trainer = {
            k.removeprefix("trainer."): v for k, v in knobs.items() if k.startswith("trainer.")
        }
        spec = plan_sweep(
            plain,
            trainer=trainer,
            controls=self.controls,
            repeat=repeat,
            name=f"{self.name}: {_label(knobs)}",
        )
        began = perf_counter()
        sweep = run_sweep(self.train_fn, spec, view=self.view, store=self.store)
        self.run_seconds.append((perf_counter() - began) / repeat)
        result = sweep.runs[-1]  # the cell's last fit is its training
        return replace(result, diagnosis=diagnose(result))

    def measure_more(self, run: RunResult, repeat: int, path: list[RunResult]) -> RunResult:
        """``run`` with ``repeat`` more replicates, put in its place on the path."""
        more = self.measure(_knobs(run), repeat)
        merged = merge_replicates((run.replicates or [run]) + (more.replicates or [more]))
        merged = replace(merged, diagnosis=diagnose(merged))
        path[next(i for i, r in enumerate(path) if r is run)] = merged
        return merged

    def left(self) -> float:
        if self.budget_s is None:
            return float("inf")
        return self.budget_s - (perf_counter() - self.start)

    def affords(self, runs: int) -> bool:
        """Whether ``runs`` more runs (like the longest so far) fit in what is left."""
        return runs * max(self.run_seconds, default=0.0) <= self.left()


def start_knobs(start: Mapping[str, Any] | None) -> dict[str, Any]:
    """The configuration a search starts from: one value per knob (a one-item list is that
    value); ``trainer.KEY`` names another Trainer argument. Names and values are checked as
    for any sweep, before the first run."""
    knobs = {}
    for key, value in (start or {}).items():
        values = as_list(value)
        if len(values) != 1:
            shown = ",".join(str(v) for v in values) or "[]"
            option = option_name(key)
            if key.startswith("trainer."):
                option, shown = "trainer", f"{key.removeprefix('trainer.')}={shown}"
            given = f"--{option} {shown}"  # the magic's words: its --workers 0,2 lists too
            raise KnobError(
                option, shown, "one value: autotune starts from one configuration", given
            )
        knobs[key] = values[0]
    return knobs


def _knobs(run: RunResult) -> dict[str, Any]:
    return run.knobs.as_dict()


def keeps(result: Comparison, finding: Finding, current: RunResult, trial: RunResult) -> str | None:
    """Why the change ``finding`` asked for is kept, given ``result`` (``trial`` against
    ``current``); None when it is dropped.

    Faster beyond noise is kept, unless it is a compile or a preload that does not win back its
    up-front time within the cell's own training. So is fewer DataLoader workers within noise:
    as fast with fewer processes leaves their cores to torch's threads and saves their memory.
    """
    spec = UP_FRONT.get(finding.knob or "")
    if result.verdict == "faster":
        return "faster" if spec is None or pays_back(spec, current, trial) else None
    workers = current_value(current, "workers")
    fewer = (
        finding.knob == "workers"
        and isinstance(finding.value, int)
        and isinstance(workers, int)
        and finding.value < workers
    )
    return AS_FAST if fewer and result.verdict == "within noise" else None


def _label(knobs: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items()) or "the cell's own settings"


def autotune(
    train_fn: Callable[[], Any],
    *,
    budget_s: float | None = None,
    steps: int | None = None,
    time: float | None = None,
    start: Mapping[str, Any] | None = None,
    repeat: int = 1,
    warmup: int = 5,
    view: LiveView | None = None,
    store: str | Path | bool | None = None,
    name: str = "autotune",
) -> SweepResult:
    """Search for faster knobs from the cell's own settings, one change at a time.

    Args:
        train_fn: a zero-argument callable that builds a Trainer and calls ``fit``.
        budget_s: seconds for the whole search (None: no limit). A run is started only when
            a run as long as the longest so far still fits; the baseline always runs.
        steps: stop each run after this many training steps (as ``--steps``).
        time: stop each run after this many seconds (as ``--time``).
        start: knob values the search starts from, on top of the cell's own settings
            (``{"workers": 2}``; other Trainer arguments as ``{"trainer.KEY": value}``).
            None: the cell as written.
        repeat: runs per configuration (as ``--repeat``); close calls are repeated anyway.
        warmup: steps left out of the steady-state figures.
        view: the live view each run is shown in (``speedlab.autotune(live=True)`` gives the
            front end's own); None shows nothing.
        store: the run store, as for ``profile_train``.
        name: label of the stored runs.

    Returns:
        A SweepResult whose runs are the path: the baseline, then each configuration tried.
        Its ``notes`` tell each step with the doctor's evidence, whether the change was kept,
        and the best configuration with its speedup; its ``best`` is that configuration's run
        (not a faster-looking run within noise) and its ``diagnosis`` the doctor's verdict on
        the path.

    Example::

        result = speedlab.autotune(train, budget_s=120, steps=40)
        print("\\n".join(result.notes))
    """
    controls = RunControls(steps=steps, time=time, warmup=warmup)
    if budget_s is not None:
        given = f"budget_s={budget_s!r}"
        budget_s = check_number("budget_s", budget_s, float, 1e-9, "seconds > 0, or None", given)
    search = _Search(
        train_fn, budget_s=budget_s, controls=controls, view=view, store=store, name=name
    )
    baseline = search.measure(start_knobs(start), repeat)
    path, notes = [baseline], [f"Baseline: {baseline.summary_line()}."]
    current, tried = baseline, set()
    stop = "the doctor has nothing left to try" if baseline.ok else "the baseline failed"
    while baseline.ok:
        finding = next_step(current, tried)
        if finding is None:
            break
        tried.add((finding.knob, finding.value))
        if finding.knob.startswith("trainer."):
            notes.append(
                f"Not tried: {finding.kind}: {finding.evidence} Autotune measures training "
                f"throughput; {finding.advice}"
            )
            continue
        if finding.knob == "compile" and search.left() < COMPILE_MIN_BUDGET_S:
            notes.append(
                f"Not tried: compile={finding.value} ({finding.kind}): compiling alone can take a "
                f"minute, more than the {search.left():.0f} s of budget left."
            )
            continue
        if len(path) - 1 >= MAX_TRIALS:
            stop = f"{MAX_TRIALS} trials were made"
            break
        if not search.affords(1):
            stop = f"another run would not fit in the {budget_s:.0f} s budget"
            break
        knobs = {**_knobs(current), finding.knob: finding.value}
        trial = search.measure(knobs, repeat)
        path.append(trial)
        step = (
            f"Step {len(path) - 1}: {finding.kind}: {finding.evidence} "
            f"Tried {finding.knob}={finding.value}"
        )
        if not trial.steps:
            notes.append(f"{step}: the run failed ({trial.error}): dropped.")
            continue
        result = compare(current, trial)
        close = not result.significant and result.speedup >= 1 + MIN_EFFECT
        close = close and search.affords(2 * CLOSE_REPEATS)
        if close:
            current = search.measure_more(current, CLOSE_REPEATS, path)
            trial = search.measure_more(trial, CLOSE_REPEATS, path)
            result = compare(current, trial)
        why = keeps(result, finding, current, trial)
        unpaid = result.verdict == "faster" and why is None
        notes.append(
            f"{step}: {trial.samples_per_s:.1f} samples/s, {result} against "
            f"{_label(_knobs(current))}"
            + (", after measuring both again (it was close)" if close else "")
            + (f", {AS_FAST}" if why == AS_FAST else "")
            + (
                ", but it does not win back its up-front time in the cell's training"
                if unpaid
                else ""
            )
            + (": kept." if why else ": dropped.")
        )
        if why:
            current = trial
    overall = compare(baseline, current)
    notes.append(f"Stopped: {stop}.")
    notes.append(
        f"Best configuration: {_label(_knobs(current))}, {current.samples_per_s:.1f} samples/s, "
        f"{overall.speedup:.2f}x the baseline ({overall.verdict})."
        if current is not baseline
        else "Best configuration: the cell's own settings; "
        + ("no change helped beyond noise." if len(path) > 1 else "no change was measured.")
    )
    return judge_sweep(path, name=name, notes=notes, chosen=current)
