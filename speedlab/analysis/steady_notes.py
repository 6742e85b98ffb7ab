"""What a run's notes say about how its figures were counted (speedlab.results.steady): the
pauses left out, long steps that recurred, steps that come in bursts, and the loop's own work
counted in batch_time. A reader of the table sees why a figure is what it is."""

from __future__ import annotations

from speedlab.results.run import RunResult
from speedlab.results.steady import PAUSE_FACTOR, PAUSE_MIN_S, Pause
from speedlab.results.table import fmt_ms

UNEVEN = 0.25
"""How far the average step may be from the typical (median) step before the notes say so."""
LOOP_SHARE = 0.2
"""Share of the step the loop's own work (hooks, logging) takes before the notes name it."""


def steady_notes(run: RunResult) -> list[str]:
    """The notes on how the run's steady figures were counted, where there is something to say."""
    s = run.steady
    if not s.steps:
        return []
    notes = []
    if s.pauses:
        steps = ", ".join(f"step {p.step + 1} ({_paused(p)})" for p in s.pauses)
        why = (
            "a full garbage collection of the process's heap, which its size and history "
            "bring on, not a knob"
            if all(p.collected for p in s.pauses)
            else "a garbage collection, a kernel's first use or other work on the machine"
        )
        notes.append(
            f"Paused: {steps} against a typical {fmt_ms(s.pauses[0].typical)}: {why}; left out "
            "of the figures."
        )
    if s.recurring:
        notes.append(
            f"{s.recurring} rounds of steps each took over {PAUSE_FACTOR - 1:.0f} typical steps "
            f"longer than the typical round or ran {fmt_ms(PAUSE_MIN_S)} or more of full garbage "
            "collection: too many to be pauses, they are counted as part of the run's cost."
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


def _paused(pause: Pause) -> str:
    """A pause's length, and the full collection's part of it where it ran one."""
    collected = f", {fmt_ms(pause.collected)} of it a full garbage collection"
    return fmt_ms(pause.seconds) + (collected if pause.collected else "")
