"""The step log: records built off the training path from its stamps, known answers by hand."""

from __future__ import annotations

import sys
import threading

import pytest

from speedlab.measure.steps import StepLog
from speedlab.results.run import RECORD_KEYS

STAMPED = False  # how ``step`` records a training batch: set for each test by ``recorded``


@pytest.fixture(autouse=True, params=["as a tuple", "as stamps"])
def recorded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test by both ways the probe records a step: a tuple with its fetches, batch and
    samples, or its start and end alone, the rest found by time (``StepLog.stamps``)."""
    monkeypatch.setattr(sys.modules[__name__], "STAMPED", request.param == "as stamps")


def step(log: StepLog, fetch: float | None, moved: float | None, start: float, end: float) -> None:
    """One step as the probe's wrappers leave it: a fetch start, the batch moved, its run."""
    if fetch is not None:
        log.begins.append(fetch)
    if moved is not None:
        log.moved.append(moved)
    if STAMPED:
        log.full = 8
        log.stamps += [start, end]
    else:
        log.steps.append((len(log.begins), log.moved[-1], start, end, 8))


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
    log.validated(1.3, 1.55)
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


def fed_the_iterator(log: StepLog, fetches: list[tuple[float, float]], start: float, end: float):
    """One step fed the loader's iterator: its fetches inside its training, start to end."""
    for begin, ended in fetches:
        log.begins.append(begin)
        log.fetch_ends.append(ended)
    log.steps.append((len(log.begins), log.moved[-1], start, end, 8))


def test_steps_fed_the_iterator_wait_for_the_fetches_inside_their_training() -> None:
    log = StepLog(t0=0.0)
    log.fetches_inside = True
    log.begin_epoch(0.5, epoch=0)
    fed_the_iterator(log, [(1.1, 1.4)], 1.0, 1.6)  # waited from the epoch's start, then 0.3
    log.moved.append(2.3)  # the step moved its batch itself, through the strategy: not a wait
    fed_the_iterator(log, [(1.8, 1.9), (2.0, 2.2)], 1.7, 2.5)  # two fetches: 0.1 + 0.2
    assert log.open_step() == 1  # a fetch inside the next step must not end it early
    log.validated(2.5, 2.55)
    fed_the_iterator(log, [], 2.6, 2.7)  # a step that fetched nothing waited for nothing
    r = log.flush()
    assert r["t"] == pytest.approx([0.5, 1.7, 2.6])
    assert r["data_time"] == pytest.approx([0.5 + 0.3, 0.3, 0.0])
    assert r["batch_time"] == pytest.approx([0.3, 0.5, 0.1])
    # Each step runs to the next one's start (less validation); the last to its end, for now.
    assert r["wall"] == pytest.approx([1.2, 0.9 - 0.05, 0.1])
    log.close(2.9)
    assert log.flush()["wall"][2] == pytest.approx(0.3)


def test_a_reader_between_a_fetch_and_its_steps_end_leaves_the_last_step_open() -> None:
    """The live view reads while the next step is fetching: the step before stays open until
    that step's record gives its start."""
    log = StepLog(t0=0.0)
    log.fetches_inside = True
    fed_the_iterator(log, [(0.1, 0.2)], 0.0, 0.5)
    log.begins.append(0.7)  # the next step's fetch has started, inside its training
    assert log.flush()["wall"] == pytest.approx([0.5])
    log.fetch_ends.append(0.8)
    log.steps.append((len(log.begins), 0.0, 0.6, 0.9, 8))
    r = log.flush()
    assert r["wall"] == pytest.approx([0.6, 0.3])
    assert r["data_time"] == pytest.approx([0.1, 0.1])


def test_full_collections_are_charged_to_the_step_they_ran_in() -> None:
    log = StepLog(t0=0.0)
    log.begin_epoch(0.0, epoch=0)
    step(log, 0.1, 0.2, 0.3, 0.6)
    log.heap.spans.append((0.35, 0.45))  # in step 0's training batch
    log.validated(0.7, 0.9)
    log.heap.spans.append((0.75, 0.85))  # in its validation: no step's
    step(log, 1.0, 1.1, 1.2, 1.3)
    log.heap.spans.append((1.25, 1.27))  # in step 1, still open
    assert log.flush()["gc_time"] == pytest.approx([0.1, 0.0])
    log.close(1.4)
    log.heap.spans.append((1.5, 1.6))  # between epochs: no step's
    log.begin_epoch(1.7, epoch=1)
    step(log, 1.8, 1.9, 2.0, 2.1)
    log.heap.spans.append((1.95, 2.05))
    log.close(2.2)
    assert log.flush()["gc_time"] == pytest.approx([0.1, 0.02, 0.1])


def test_a_stamped_step_is_read_whole_and_its_loaders_last_batch_sized_after() -> None:
    """The training path appends a step's start before its end: a reading between the two
    takes the steps before it only. The loader's last batch is sized once its epoch ends,
    built or not."""
    log = StepLog(t0=0.0)
    log.full = 8
    step(log, 0.1, 0.2, 0.3, 0.4)
    log.begins.append(0.5)
    log.moved.append(0.6)
    log.stamps.append(0.7)  # the next step's training has started
    assert log.flush()["samples"] == [8]
    log.stamps.append(0.8)
    log.last_batch(4)
    log.last_batch(4)  # the epoch's end and the fit's: once is what counts
    r = log.flush()
    assert r["samples"] == [8, 4]
    assert r["data_time"] == pytest.approx([0.1, 0.1])
    step(log, 0.9, 1.0, 1.1, 1.2)
    log.last_batch(4)  # built first
    assert log.flush()["samples"] == [8, 4, 4]
