"""The notes on how a run's steady figures were counted: each says what the rule did."""

from __future__ import annotations

from speedlab.analysis.steady_notes import steady_notes
from tests.records import run_of


def test_a_pause_is_named_with_its_step_and_left_out() -> None:
    batch = [0.005] * 61
    batch[41] += 0.150
    (note,) = steady_notes(run_of([0.0] * 61, batch))
    assert note.startswith("Paused: step 42 (155.0 ms) against a typical 5.0 ms")


def test_long_rounds_that_recur_are_said_to_be_counted() -> None:
    batch = [0.005] * 61
    for i in range(1, 61, 10):
        batch[i] = 0.2
    notes = steady_notes(run_of([0.0] * 61, batch))
    assert notes[0] == (
        "6 rounds of steps each took over 9 typical steps longer than the typical round or ran "
        "20.0 ms or more of full garbage collection: too many to be pauses, they are counted as "
        "part of the run's cost."
    )


def test_a_full_collection_is_named_as_one() -> None:
    batch = [0.037] * 61
    batch[26] += 0.225
    run = run_of([0.0] * 61, batch)
    run.records["gc_time"] = [0.0] * 26 + [0.224] + [0.0] * 34
    (note,) = steady_notes(run)
    assert note == (
        "Paused: step 27 (262.0 ms, 224.0 ms of it a full garbage collection) against a typical "
        "37.0 ms: a full garbage collection of the process's heap, which its size and history "
        "bring on, not a knob; left out of the figures."
    )
