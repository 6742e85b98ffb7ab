"""The notes on how a run's steady figures were counted: each says what the rule did."""

from __future__ import annotations

from dataclasses import replace

from speedlab.analysis.steady_notes import steady_notes
from speedlab.results.system import SystemSummary
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
        "20.0 ms or more of full garbage collection: too many, or too much of the time, to be "
        "pauses, they are counted as part of the run's cost."
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
        "bring on, not a knob; left out of the figures (11% of the steady steps' time)."
    )


def test_many_pauses_are_summed_up_with_their_share_of_the_time() -> None:
    batch = [0.005] * 801
    for i in range(100, 800, 100):  # 7 pauses of 60 ms: 9.7% of the other rounds' time
        batch[i] = 0.060
    (note,) = steady_notes(run_of([0.0] * 801, batch))
    assert note == (
        "Paused: 7 steps of 60.0 ms to 60.0 ms (steps 101, 201, 301, 401, ... 701) against a "
        "typical 5.0 ms: a garbage collection, a kernel's first use or other work on the "
        "machine; left out of the figures (10% of the steady steps' time)."
    )


def test_other_processes_time_slices_are_the_runs_cost_and_named() -> None:
    """As on a 2-core machine where another process spun 1 s in 3: a 24 ms time slice in a
    few of its 1 ms steps, 4.9% of the rounds (which the count alone would leave out) and more
    than half the time."""
    batch = [0.001] * 801
    for i in range(40, 801, 20):
        batch[i] = 0.024
    run = replace(
        run_of([0.0] * 801, batch),
        system=SystemSummary(cores=2, usable_cores=2, cpu_percent=63.5, main_cpu_percent=100.0),
    )  # the machine's 1.27 cores less the run's 1.0
    note, uneven = steady_notes(run)
    assert uneven.startswith("The typical step takes 1.0 ms, the average 2.1 ms")
    assert note == (
        "39 rounds of steps each took over 9 typical steps longer than the typical round or ran "
        "20.0 ms or more of full garbage collection (other processes took about 0.3 cores while "
        "it ran): too many, or too much of the time, to be pauses, they are counted as part of "
        "the run's cost."
    )
