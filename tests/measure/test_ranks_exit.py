"""speedlab.measure.ranks: how a child rank's records and error reach the parent, in real forked
processes and without torch, so that the edge runs of `make test` check it on the oldest and
newest Python (the exit handler's timing changed in 3.13). tests/measure/test_ranks.py runs the
same path in real DDP ranks."""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from speedlab.measure.ranks import RankRecorder
from speedlab.results.run import RunResult
from tests.records import run_of

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork (POSIX)")


def in_a_rank(body: Callable[[], None]) -> int | None:
    """Run ``body`` in a forked child as torch.multiprocessing runs a rank: an error becomes
    ``sys.exit(1)`` (its traceback goes to the parent another way). The child's exit code."""

    def rank() -> None:
        try:
            body()
        except Exception:
            sys.exit(1)

    process = multiprocessing.get_context("fork").Process(target=rank)
    process.start()
    process.join(60)
    return process.exitcode


def test_a_failing_rank_reports_the_error_it_saw_and_its_steps_so_far(tmp_path: Path) -> None:
    recorder = RankRecorder()
    steps = run_of([0.001] * 5, [0.004] * 5)

    def fail(error: BaseException | None) -> None:  # what the probe does on its way out
        recorder.finish(steps, error)

    def body() -> None:
        assert recorder.in_child
        recorder.report_on_exit(fail)
        try:
            raise ZeroDivisionError("cell bug")  # in the sixth training step
        except ZeroDivisionError as error:
            recorder.saw(error)  # the probe's step hooks see it leave the step
            raise

    assert in_a_rank(body) == 1
    job = recorder.collect()
    assert job is not None and job.error == "rank 0 failed: ZeroDivisionError: cell bug"
    (rank,) = job.ranks
    assert rank.error == "ZeroDivisionError: cell bug" and rank.steps == 5
    assert not recorder.handoff.exists()  # collected and removed


def test_a_rank_that_finishes_hands_over_once_and_its_exit_handler_stays_quiet(
    tmp_path: Path,
) -> None:
    recorder = RankRecorder()
    called = tmp_path / "exit-handler-ran"

    def body() -> None:
        recorder.report_on_exit(lambda error: called.write_text(repr(error)))
        recorder.finish(run_of([0.001] * 5, [0.004] * 5), None)
        recorder.error = ZeroDivisionError("seen after the hand-over")  # must not be reported

    assert in_a_rank(body) == 0
    job = recorder.collect()
    assert job is not None and job.ok and job.error is None
    assert [e.steps for e in job.ranks] == [5]
    assert not called.exists()


def test_the_parent_is_not_a_child_rank_and_has_nothing_to_collect() -> None:
    recorder = RankRecorder()
    assert not recorder.in_child and not recorder.ready() and recorder.collect() is None
    assert isinstance(recorder.finish(RunResult(), None), RunResult)
