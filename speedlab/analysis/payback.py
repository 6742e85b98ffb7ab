"""The doctor's rule on knobs that spend time up front to save time on every step:
``torch.compile`` (the compile phase) and ``--preload`` (the preload phase). What the phase
cost, what it saves per step, and after how many steps it pays off, against the length of the
cell's own training. Only a sweep shows it: it needs the same run with the knob and without.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from speedlab.analysis.compare import compare
from speedlab.analysis.findings import differs
from speedlab.results.comparison import Verdict
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.results.table import fmt_ms

PAYBACK_STEPS = 1000
"""Break-even step count up to which an up-front cost is reported as paying off (info) when
the cell's own length is unknown; beyond it, or never, a warning."""


@dataclass(frozen=True)
class UpFront:
    """A knob whose cost is a phase before the steady steps."""

    kind: str
    knob: str
    doing: str  # "Compiling"
    when: str  # when the phase ran
    in_first_step: bool  # the phase's time holds one ordinary step as well


UP_FRONT = {
    spec.knob: spec
    for spec in (
        UpFront("compile_payback", "compile", "Compiling", "the first compiled step", True),
        UpFront("preload_payback", "preload", "Preloading", "before training", False),
    )
}
_COLD_WARM = {
    "cold": "a cold compile cache",
    "warm": "a warm compile cache: a first compile takes longer",
    "mixed": "a partly warm compile cache",
}


def _off(value: object) -> bool:
    return value in (None, "off")


def up_front_cost(spec: UpFront, without: RunResult, with_knob: RunResult) -> float:
    """Seconds the knob's phase cost beyond an ordinary step."""
    cost = with_knob.phases.get(spec.knob, 0.0)
    return max(0.0, cost - without.step_time) if spec.in_first_step else cost


def break_even(spec: UpFront, without: RunResult, with_knob: RunResult) -> float:
    """Steps after which the knob's up-front cost is won back (``inf``: never; 0: free)."""
    saving = without.step_time - with_knob.step_time
    cost = up_front_cost(spec, without, with_knob)
    if compare(without, with_knob).verdict != Verdict.faster or not saving > 0:
        return math.inf
    return math.ceil(cost / saving)


def break_even_text(steps: float, run: RunResult) -> str:
    """``steps`` in words, with the training time and epochs they stand for where known."""
    if math.isinf(steps):
        return "never: its steps are not faster here"
    text = f"after {steps:.0f} steps ({steps * run.step_time:.1f} s of training"
    per_epoch = run.workload.get("epoch_steps")
    if per_epoch:
        text += f", {steps / per_epoch:.1f} epochs of {per_epoch} steps"
    return text + ")"


def pays_back(spec: UpFront, without: RunResult, run: RunResult) -> bool:
    """Whether the knob wins back its up-front cost within the cell's own training (within
    ``PAYBACK_STEPS`` where the cell's length is unknown)."""
    planned = run.workload.get("planned_steps")
    return break_even(spec, without, run) <= (planned if planned else PAYBACK_STEPS)


def _over_the_cell(spec: UpFront, without: RunResult, run: RunResult) -> str:
    """What the knob gains or loses over the cell's whole training, where its length is known."""
    planned = run.workload.get("planned_steps")
    if not planned:
        return ""
    net = planned * (without.step_time - run.step_time) - up_front_cost(spec, without, run)
    gained = (
        f"saves about {net:.1f} s in all" if net >= 0 else f"costs {-net:.1f} s more than it saves"
    )
    return f" Over the cell's own training ({planned} steps) it {gained}."


def _finding(spec: UpFront, without: RunResult, run: RunResult) -> Finding:
    cost = up_front_cost(spec, without, run)
    steps = break_even(spec, without, run)
    cache = _COLD_WARM.get(run.workload.get("compile_cache", "")) if spec.knob == "compile" else ""
    evidence = (
        f"{spec.doing} cost {cost:.1f} s ({spec.when}{', with ' + cache if cache else ''}); "
        f"steady steps take {fmt_ms(run.step_time)} with {spec.knob}={run.knobs[spec.knob]} "
        f"against {fmt_ms(without.step_time)} without ({compare(without, run)})."
    )
    if math.isinf(steps):
        advice = (
            f"Break-even: {break_even_text(steps, run)}, so it only adds start-up time on this "
            f"model and hardware: leave --{spec.knob} off."
        )
        summary = f"{spec.doing} costs {cost:.1f} s up front and its steps are not faster here"
        return Finding(spec.kind, evidence, advice, spec.knob, "warn", "off", summary)
    pays = pays_back(spec, without, run)
    advice = f"Break-even {break_even_text(steps, run)}.{_over_the_cell(spec, without, run)} " + (
        "It pays off in training longer than the break-even and costs time in shorter."
        if pays
        else f"Keep --{spec.knob} off unless the training runs longer than the break-even."
    )
    value = run.knobs[spec.knob] if pays else "off"
    within = "within" if pays else "beyond"
    training = (
        "this training"
        if run.workload.get("planned_steps")
        else f"{PAYBACK_STEPS} steps (this training's length is unknown)"
    )
    summary = (
        f"{spec.doing} costs {cost:.1f} s up front, won back after {steps:.0f} steps, {within} "
        f"{training}"
    )
    severity = "info" if pays else "warn"
    return Finding(spec.kind, evidence, advice, spec.knob, severity, value, summary)


def up_front_of(runs: Sequence[RunResult], run: RunResult) -> list[tuple[UpFront, RunResult]]:
    """Each up-front knob ``run`` has that ``runs`` also ran without: (knob, that run)."""
    found = []
    for spec in UP_FRONT.values():
        if not run.ok or _off(run.ran.get(spec.knob)):
            continue
        without = next(
            (
                other
                for other in runs
                if other.ok
                and other.fit == run.fit
                and _off(other.ran.get(spec.knob))
                and differs(other.knobs, run.knobs) == {spec.knob}
            ),
            None,
        )
        if without is not None:
            found.append((spec, without))
    return found


def payback(sweep: SweepResult) -> list[Finding]:
    """A finding for each run whose compile or preload the sweep also ran without."""
    return [
        _finding(spec, without, run)
        for run in sweep.runs
        for spec, without in up_front_of(sweep.runs, run)
    ]


def break_evens(runs: Sequence[RunResult], run: RunResult) -> dict[str, float | None]:
    """The steps after which each up-front knob of ``run`` pays back, against the run of
    ``runs`` without it (None: never), as a run keeps them (``RunResult.break_even``)."""
    found = {spec.knob: break_even(spec, without, run) for spec, without in up_front_of(runs, run)}
    return {knob: None if math.isinf(steps) else steps for knob, steps in found.items()}


def break_even_notes(run: RunResult) -> list[str]:
    """The run's stored break-even figures in words, one per up-front knob."""
    return [
        f"{knob} break-even: {break_even_text(math.inf if steps is None else steps, run)}"
        for knob, steps in run.break_even.items()
    ]
