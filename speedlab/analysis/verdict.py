"""The doctor on a whole sweep: the verdict (the best run, and which single-knob changes
helped beyond noise), what only a sweep shows (compile and preload payback, workers slowing the model),
and what still limits the best run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from speedlab.analysis.compare import compare, run_cores
from speedlab.analysis.doctor import diagnose
from speedlab.analysis.findings import differs, in_doctors_order, torch_threads, unique_findings
from speedlab.analysis.payback import (
    PAYBACK_STEPS,
    break_even,
    break_even_text,
    break_evens,
    payback,
    pays_back,
    up_front_of,
)
from speedlab.analysis.predict import prediction_said
from speedlab.analysis.scaling import scaling, scaling_notes
from speedlab.analysis.traps import notebook_traps
from speedlab.results.comparison import Verdict
from speedlab.results.findings import Finding
from speedlab.results.knobs import option_text
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.results.table import fmt_ms

_EFFECTS = {
    Verdict.faster: "Helped",
    Verdict.within_noise: "Within noise",
    Verdict.slower: "Slower",
    Verdict.too_few: "Too few measurements to tell",
}
"""How the verdict names each single-knob change, by its comparison's verdict."""
BATCH_TIME_GROWTH = 0.20
"""Growth of batch_time between the fewest and the most workers of a sweep that shows the
workers taking cores from the model."""
STEADY = 0.10
"""Change of a time (data_time, batch_time), either way, below which ``verdicts`` says it stayed the same."""
_PARTS = ("data_time", "batch_time")
"""The parts of a step whose change ``verdicts`` reports beside the throughput."""


def _moved(name: str, before: float, after: float) -> str:
    """How a time moved between two runs, in words: ``data_time fell from 9.0 ms to
    2.0 ms``."""
    if not (math.isfinite(before) and math.isfinite(after) and before > 0):
        return f"{name} {fmt_ms(before)} then {fmt_ms(after)}"
    if abs(after / before - 1) < STEADY:
        return f"{name} stayed about the same ({fmt_ms(before)}, then {fmt_ms(after)})"
    verb = "grew" if after > before else "fell"
    return f"{name} {verb} from {fmt_ms(before)} to {fmt_ms(after)}"


def verdicts(sweep: SweepResult) -> list[str]:
    """One sentence per run after the baseline: its speedup and verdict against the baseline
    (its stored comparison: faster, slower, within noise or too few to tell) and how data_time
    and batch_time moved, the two parts that explain it, and what became of speedlab's
    prediction for it (``prediction_said``). Lessons print these, so that what they
    say about a result is that run's own figures."""
    lines = []
    for run in sweep.runs[1:]:
        base = sweep.baseline_of(run)
        if run is base:  # a later fit's own baseline
            continue
        if not run.ok:
            lines.append(f"{run.label(base)}: failed: {run.error}")
            continue
        if not base.ok:
            lines.append(f"{run.label(base)}: not compared: its baseline failed.")
            continue
        moves = (_moved(name, getattr(base, name), getattr(run, name)) for name in _PARTS)
        predicted = prediction_said(run)
        lines.append(
            f"{run.label(base)}: {run.comparison}; {', '.join(moves)}."
            + (f" {predicted}" if predicted else "")
        )
    return lines


def _verdict(sweep: SweepResult) -> Finding:
    best = sweep.best
    base = sweep.baseline if best is None else sweep.baseline_of(best)
    if best is None:
        return Finding(
            "verdict",
            "Every run failed; nothing was measured.",
            "See the errors in the table.",
            severity="critical",
            summary="Every run failed, so nothing was measured; the table shows the errors",
        )
    if not base.ok:
        return Finding(
            "verdict",
            f"The baseline failed, so no run was compared with it: {base.error}",
            "Fix what failed, or give the baseline's option a value that runs first (the first "
            "value of each option is the baseline).",
            severity="critical",
            summary="The baseline failed, so no run was compared with it",
        )
    effects: dict[str, list[str]] = {verdict: [] for verdict in _EFFECTS}
    for run in sweep.runs[1:]:
        if not (run.ok and sweep.baseline_of(run).ok) or len(differs(base.knobs, run.knobs)) != 1:
            continue
        c = run.comparison
        effects[c.verdict].append(f"{run.label(sweep.baseline_of(run))} {c.speedup:.2f}x")
    said = "".join(
        f" {_EFFECTS[verdict]}: {', '.join(items)}." for verdict, items in effects.items() if items
    )
    c = best.comparison
    if best is not base and c.verdict == Verdict.too_few:
        return Finding(
            "verdict",
            f"Too few measurements to tell whether any run beat the baseline (fastest: "
            f"{best.label(base)}, {c})." + said,
            f"Measure again with {c.advice}.",
            severity="info",
            summary=f"Too few measurements to tell whether {best.label(base)} beat the "
            "baseline; measure again with more",
        )
    if best is base or c.verdict != Verdict.faster:
        fastest = "" if best is base else f" (fastest: {best.label(base)}, {c})"
        return Finding(
            "verdict",
            f"No run beat the baseline beyond noise{fastest}." + said,
            "Keep the baseline configuration; the findings below say what limits it.",
            severity="info",
            summary="No run beat the baseline beyond noise"
            + ("" if best is base else f" (fastest: {best.label(base)}, {c.speedup:.2f}x)")
            + "; keep the baseline",
        )
    planned = best.workload.get("planned_steps")
    length = (
        f"the cell's own {planned} steps"
        if planned
        else f"the {PAYBACK_STEPS} steps speedlab counts on where the cell's length is unknown"
    )
    unpaid, never = [], []
    for spec, without in up_front_of(sweep.runs, best):
        steps = break_even(spec, without, best)
        doing = f"{spec.doing.lower()} ({spec.knob}={best.knobs[spec.knob]})"
        if math.isinf(steps):
            never.append(spec.knob)
            unpaid.append(f"{doing} never pays back: its steps are not faster than without it")
        elif not pays_back(spec, without, best):
            unpaid.append(
                f"{doing} pays back its up-front time only {break_even_text(steps, best)}, "
                f"more than {length}"
            )
    keep = f"Keep {best.label(base)}."
    summary = f"Best: {best.label(base)}, {c.speedup:.2f}x the baseline's samples/s; keep it"
    if never:
        offs = " and ".join(option_text(knob, "off") for knob in never)
        summary = (
            f"Best per step: {best.label(base)}, {c.speedup:.2f}x, but its "
            f"{' and '.join(never)} never pays back; run it with {offs}"
        )
        keep = (
            f"Fastest per step, but {'; '.join(unpaid)}. Run it with {offs}, which saves the "
            "up-front time."
        )
    elif unpaid:
        summary = (
            f"Best per step: {best.label(base)}, {c.speedup:.2f}x, but only for training longer "
            "than its up-front cost"
        )
        keep = (
            f"Fastest per step, but {'; '.join(unpaid)}. Keep {best.label(base)} only for "
            "longer training."
        )
    return Finding(
        "verdict",
        f"Best: {best.label(base)} at {best.samples_per_s:.1f} samples/s, {c}." + said,
        keep,
        severity="info",
        summary=summary,
    )


def _workers_slow_the_model(sweep: SweepResult) -> list[Finding]:
    """batch_time growing with workers, among runs that differ only in workers: one finding,
    of the group where it grew most (a sweep of workers and preload has a group for each
    preload, and two findings of one cause read as one said twice)."""
    groups: dict[str, list[RunResult]] = {}
    for run in sweep.runs:
        if run.ok and isinstance(run.ran.get("workers"), int) and math.isfinite(run.batch_time):
            rest = {k: v for k, v in run.settings().items() if k != "workers"}
            groups.setdefault(repr(sorted(rest.items())), []).append(run)
    findings: list[tuple[float, Finding]] = []
    for runs in groups.values():
        runs = sorted(runs, key=lambda r: r.ran["workers"])
        few, many = runs[0], runs[-1]
        cores, threads = run_cores(many), torch_threads(many)
        grew = many.batch_time / few.batch_time - 1 if few.batch_time > 0 else 0.0
        w_few, w_many = few.ran["workers"], many.ran["workers"]
        if w_many == w_few or w_many + threads <= cores or grew < BATCH_TIME_GROWTH:
            continue
        evidence = (
            f"batch_time grows from {fmt_ms(few.batch_time)} with workers={w_few} to "
            f"{fmt_ms(many.batch_time)} with workers={w_many} (+{grew:.0%}): {w_many} worker(s) + "
            f"{threads} torch thread(s) share {cores} cores."
        )
        advice = (
            "The workers take cores from the model's compute. Keep the workers that pay off "
            "overall (see samples/s) or give torch fewer threads: "
            f"torch.set_num_threads({max(1, cores - w_many)})."
        )
        summary = (
            f"batch_time grows {grew:.0%} from workers={w_few} to workers={w_many}: the workers "
            "take the model's cores"
        )
        fewer = max(1, cores - threads)
        finding = Finding("oversubscribed", evidence, advice, "workers", "warn", fewer, summary)
        findings.append((grew, finding))
    return [max(findings, key=lambda found: found[0])[1]] if findings else []


def _measured_here(sweep: SweepResult, best: RunResult, finding: Finding) -> Finding:
    """``finding`` of the best run, or, where this sweep already measured its suggestion (a
    run that differs from the best only there), the finding saying what that run measured."""
    if finding.knob is None or finding.value is None:
        return finding
    for run in sweep.runs:
        same_but_knob = run is not best and differs(best.knobs, run.knobs) == {finding.knob}
        if same_but_knob and run.ok and run.ran.get(finding.knob) == finding.value:
            measured = (
                f"{finding.advice} This sweep already measured "
                f"{option_text(finding.knob, finding.value)} against it: {compare(best, run)}."
            )
            summary = (
                f"{finding.summary}; this sweep measured {option_text(finding.knob, finding.value)}"
                if finding.summary
                else ""
            )
            return replace(finding, advice=measured, knob=None, value=None, summary=summary)
    return finding


def diagnose_sweep(sweep: SweepResult) -> list[Finding]:
    """The sweep's verdict, what only a sweep shows, and what still limits its best run.

    First the ``verdict`` (best run, which single-knob changes helped beyond noise; none for a
    single run, which has nothing to compare), then compile and preload payback and workers slowing the
    model, notebook traps of failed runs, and the best run's own findings, each saying what
    this sweep already measured of its suggestion.
    """
    findings = payback(sweep)  # its advice weighs the measured runs against the cell's length
    for run in sweep.runs:
        if not run.ok:
            findings += notebook_traps(run)
    best = sweep.best
    if best is not None:
        tried = _workers_slow_the_model(sweep) + diagnose(best)
        findings += [_measured_here(sweep, best, f) for f in tried]
    verdict = [] if len(sweep.runs) == 1 and best is not None else [_verdict(sweep)]
    return verdict + in_doctors_order(unique_findings(findings))


def judge_sweep(
    runs: Sequence[RunResult],
    *,
    name: str | None = None,
    notes: Sequence[str] = (),
    chosen: RunResult | None = None,
) -> SweepResult:
    """The sweep of these runs (the first is the baseline), judged once: each run with its
    comparison with the baseline (of the same fit, where the cell fits more than once), its
    up-front knobs' break-even and its scaling efficiency; the sweep with its findings
    (``diagnose_sweep``). ``chosen`` is one of ``runs``, the run a
    search settled on. Every view formats what this stores."""
    runs = list(runs)
    bases: dict[int | None, RunResult] = {}  # each fit of a cell against the same fit
    found = scaling(runs)
    scaled = {id(item.run): f"scaling: {item}" for item in found}
    judged = [
        replace(
            run,
            comparison=compare(bases.setdefault(run.fit, run), run),
            break_even=break_evens(runs, run),
            notes=run.notes + ([scaled[id(run)]] if id(run) in scaled else []),
        )
        for run in runs
    ]
    pick = next((j for r, j in zip(runs, judged) if r is chosen), None)
    sweep = SweepResult(judged, name=name, notes=[*notes, *scaling_notes(found)], chosen=pick)
    return replace(sweep, diagnosis=diagnose_sweep(sweep))
