"""The step log: records built off the training path from its stamps, known answers by hand."""

from __future__ import annotations

import threading

import pytest

from speedlab.measure.steps import StepLog
from speedlab.results.run import RECORD_KEYS


def step(log: StepLog, fetch: float | None, moved: float | None, start: float, end: float) -> None:
    """One step as the probe's wrappers leave it: a fetch start, the batch moved, its run."""
    if fetch is not None:
        log.begins.append(fetch)
    if moved is not None:
        log.moved[0] = moved
    log.steps.append((len(log.begins), log.moved[0], start, end, 8))


def test_an_epochs_steps_by_hand() -> None:
    log = StepLog(t0=0.5, warmup=1)
    log.begin_epoch(1.0, epoch=3)
    step(log, 1.1, 1.3, 1.4, 1.6)  # its wait runs from the epoch's start, not its fetch
    step(log, 1.7, 1.8, 1.9, 2.2)
    r = log.flush()
    assert r["t"] == pytest.approx([0.5, 1.2])
    assert r["data_time"] == pytest.approx([0.3, 0.1])
    assert r["batch_time"] == pytest.approx([0.2, 0.3])
    assert r["wall"] == pytest.approx([0.7, 0.5])  # the open step: to its batch's end, for now
    assert r["phase"] == ["epoch_start", "steady"]
    assert r["epoch"] == [3, 3]
    assert r["samples"] == [8, 8]
    log.close(2.4)
    assert log.flush()["wall"][1] == pytest.approx(0.7)
    log.close(2.9)  # a later end of an ended step changes nothing
    assert log.flush()["wall"] == pytest.approx([0.7, 0.7])


def test_validation_inside_a_step_is_left_out_of_its_wall() -> None:
    log = StepLog(t0=0.0)
    step(log, 1.0, 1.1, 1.2, 1.5)
    log.validated(0.25)
    step(log, 2.0, 2.1, 2.2, 2.3)
    assert log.flush()["wall"][0] == pytest.approx(1.0 - 0.25)
    assert log.open_step() == 1


def test_a_batch_nothing_moved_waits_until_its_training_starts() -> None:
    log = StepLog(t0=0.0)
    step(log, 1.0, 1.1, 1.2, 1.3)
    step(log, 2.0, None, 2.4, 2.5)  # the last batch moved before this step began
    assert log.flush()["data_time"] == pytest.approx([0.1, 0.4])


def test_first_fetch_of_an_epoch_closes_nothing_and_the_next_epoch_starts_anew() -> None:
    log = StepLog(t0=0.0)
    log.begin_epoch(0.0, epoch=0)
    step(log, 0.1, 0.2, 0.3, 0.4)
    log.close(0.6)  # the epoch's end
    log.begin_epoch(0.9, epoch=1)
    assert log.held()
    step(log, 1.0, 1.2, 1.3, 1.4)
    assert not log.held()
    r = log.flush()
    assert r["wall"][0] == pytest.approx(0.6)
    assert r["data_time"][1] == pytest.approx(0.3)
    assert r["epoch"] == [0, 1]
    assert r["phase"] == ["epoch_start", "epoch_start"]


def test_phases_compile_then_warmup_then_steady() -> None:
    log = StepLog(t0=0.0, warmup=2, compiled=True)
    for i in range(4):
        step(log, float(i), i + 0.1, i + 0.2, i + 0.3)
    assert log.flush()["phase"] == ["compile", "warmup", "steady", "steady"]


def test_attached_mid_epoch_the_first_step_waits_from_the_log_start() -> None:
    log = StepLog(t0=5.0)
    step(log, None, 5.5, 5.6, 5.7)
    assert log.flush()["data_time"] == pytest.approx([0.5])


def test_reading_from_another_thread_while_steps_are_appended() -> None:
    """The live view's thread flushes while the training path appends: the records end as a
    single reading after the fit would build them."""
    log, alone = StepLog(t0=0.0), StepLog(t0=0.0)
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            r = log.flush()
            assert len({len(r[k]) for k in RECORD_KEYS}) == 1

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(20000):
        for each in (log, alone):
            step(each, float(i), i + 0.25, i + 0.5, i + 0.75)
    done.set()
    reader.join()
    assert log.flush() == alone.flush()


def test_a_step_followed_without_a_fetch_keeps_its_wall_to_its_end() -> None:
    """Steps fed the loader's iterator fetch inside their training: a fetch ends the step
    before the one it runs in, and a step the next followed without a fetch is never ended."""
    log = StepLog(t0=0.0)
    step(log, 1.0, None, 1.1, 1.5)
    step(log, None, None, 1.6, 1.9)  # no fetch between: step 0 keeps its wall to its end
    step(log, 2.2, None, 2.0, 2.4)  # fetched inside its own training: ends step 1
    log.close(2.6)
    assert log.flush()["wall"] == pytest.approx([0.5, 2.2 - 1.0, 2.6 - 2.2])
