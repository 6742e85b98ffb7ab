"""What a run's notes say about how its figures were counted (speedlab.results.steady): the
pauses left out, long steps that recurred, steps that come in bursts, and the loop's own work
counted in batch_time. A reader of the table sees why a figure is what it is."""

from __future__ import annotations

from speedlab.analysis.compare import other_processes_cores
from speedlab.results.run import RunResult
from speedlab.results.steady import PAUSE_FACTOR, PAUSE_MIN_S, Pause
from speedlab.results.table import fmt_ms

UNEVEN = 0.25
"""How far the average step may be from the typical (median) step before the notes say so."""
LOOP_SHARE = 0.2
"""Share of the step the loop's own work (hooks, logging) takes before the notes name it."""
LISTED_PAUSES = 5
"""Pauses named one by one; more are summed up (a run of thousands of steps may leave out
hundreds, 5% of its rounds, each a line's worth)."""
OTHERS_NAMED_CORES = 0.1
"""Cores other processes took on average before a pause's likely causes name them."""


def steady_notes(run: RunResult) -> list[str]:
    """The notes on how the run's steady figures were counted, where there is something to say."""
    s = run.steady
    if not s.steps:
        return []
    notes = []
    if s.pauses:
        notes.append(_pauses_note(run))
    if s.recurring:
        notes.append(
            f"{s.recurring} rounds of steps each took over {PAUSE_FACTOR - 1:.0f} typical steps "
            f"longer than the typical round or ran {fmt_ms(PAUSE_MIN_S)} or more of full garbage "
            f"collection{_others(run)}: too many, or too much of the time, to be pauses, they are "
            "counted as part of the run's cost."
        )
    if abs(s.step_time / s.typical_step - 1) > UNEVEN:
        why = "the workers deliver in bursts" if run.loader_workers() else "the steps are uneven"
        notes.append(
            f"The typical step takes {fmt_ms(s.typical_step)}, the average "
            f"{fmt_ms(s.step_time)} ({why}): the figures are averages"
            + (" over whole rounds of the workers." if run.loader_workers() else ".")
        )
    if s.loop_time > LOOP_SHARE * s.step_time:
        notes.append(
            f"The loop's own work between steps (hooks, logging, a progress bar) takes "
            f"{fmt_ms(s.loop_time)} a step, {s.loop_time / s.step_time:.0%} of it; batch_time "
            "counts it."
        )
    return notes


def _pauses_note(run: RunResult) -> str:
    """The pauses left out: each one's step and length (a summary where there are many), why
    they come, and their share of the steady steps' time, which the figures do not hold."""
    pauses = run.steady.pauses
    if len(pauses) <= LISTED_PAUSES:
        steps = ", ".join(f"step {p.step + 1} ({_paused(p)})" for p in pauses)
    else:
        lengths = sorted(p.seconds for p in pauses)
        some = ", ".join(str(p.step + 1) for p in pauses[: LISTED_PAUSES - 1])
        steps = (
            f"{len(pauses)} steps of {fmt_ms(lengths[0])} to {fmt_ms(lengths[-1])} (steps "
            f"{some}, ... {pauses[-1].step + 1})"
        )
    if all(p.collected for p in pauses):
        why = (
            "a full garbage collection of the process's heap, which its size and history "
            "bring on, not a knob"
        )
    else:
        why = "a garbage collection, a kernel's first use or other work on the machine"
        why += _others(run)
    left_out = sum(p.seconds for p in pauses)
    share = left_out / (run.steady.seconds + left_out)
    return (
        f"Paused: {steps} against a typical {fmt_ms(pauses[0].typical)}: {why}; left out of "
        f"the figures ({share:.0%} of the steady steps' time)."
    )


def _others(run: RunResult) -> str:
    """Other processes' CPU while the run ran, where it is worth naming beside long steps."""
    others = other_processes_cores(run)
    if others < OTHERS_NAMED_CORES:
        return ""
    return f" (other processes took about {others:.1f} cores while it ran)"


def _paused(pause: Pause) -> str:
    """A pause's length, and the full collection's part of it where it ran one."""
    collected = f", {fmt_ms(pause.collected)} of it a full garbage collection"
    return fmt_ms(pause.seconds) + (collected if pause.collected else "")
