"""Tests for speedlab.assignments: real Lightning training on the assignment's real JPEGs, with
real worker processes, graded by check() as a student's notebook does."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace

import lightning.pytorch as pl
import pytest

from speedlab.assignments import FASTER_PIPELINE, CheckResult, check, slow_pipeline
from speedlab.assignments.pass_mark import MAX_PASS_MARK, pass_mark, reach
from speedlab.labs import QUIET_TRAINER
from speedlab.results.run import RunResult
from tests.cgroups import GRADE_SOLUTION, quota_or_skip, run_under
from tests.records import run_of

# Fewer, shorter pairs where the claim does not need the assignment's full measurement.
SHORT = replace(FASTER_PIPELINE, steps=20, pairs=2)


def submission(change: Callable[[object], None]) -> Callable[[], None]:
    """The student notebook's train() with ``change`` applied to its DataModule."""

    def train() -> None:
        model, data = slow_pipeline()
        change(data)
        pl.Trainer(max_epochs=1, limit_val_batches=0, **QUIET_TRAINER).fit(model, data)

    return train


def untouched(data: object) -> None:
    pass


def four_workers(data: object) -> None:  # the solution notebook's change
    data.num_workers = 4


@pytest.fixture
def busy_core() -> Iterator[None]:
    """Another process keeps one core busy while the test runs."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait()


def require_graded(result: CheckResult) -> None:
    """Skip when the check declined: other processes took the CPU (it says how much)."""
    if not result.graded:
        pytest.skip(str(result))


def test_the_untouched_pipeline_fails_on_its_speed() -> None:
    result = check(submission(untouched), replace(SHORT, pairs=1))
    require_graded(result)
    assert not result.passed
    assert "x needed on this machine's" in str(result) and str(result).startswith("FAIL: ")


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda data: setattr(data, "throttle", None), "the storage is open_binary"),
        (lambda data: data.shapes.update(size=48), "the image size is 48x48"),
    ],
    ids=["no-throttle", "image-size"],
)
def test_a_submission_that_changes_the_data_fails_after_one_pair(
    change: Callable[[object], None], said: str
) -> None:
    result = check(submission(change))
    assert result.graded and not result.passed
    assert str(result).startswith(f"FAIL: the data changed: {said}, the assignment's is ")
    assert len(result.reference) == len(result.student) == 1


def test_beside_a_busy_core_a_slow_submission_is_not_graded_and_says_why(busy_core: None) -> None:
    result = check(submission(untouched), replace(SHORT, pairs=1))
    assert not result.graded and not result.passed
    assert result.other_cores >= 0.5
    assert str(result).startswith("CANNOT GRADE NOW: other processes used ")
    assert "close them and run check() again" in str(result)


def test_beside_a_busy_core_running_out_of_time_is_not_a_fail(busy_core: None) -> None:
    result = check(submission(four_workers), replace(SHORT, pairs=1, time_limit_s=3))
    assert not result.graded, str(result)
    assert "the time limit of 3 s came before all runs finished" in str(result)


@pytest.mark.slow
def test_beside_a_busy_core_the_reference_solution_never_fails(busy_core: None) -> None:
    result = check(submission(four_workers), SHORT)
    assert result.passed or not result.graded, str(result)


@pytest.mark.slow
def test_in_a_container_beside_a_busy_process_the_verdict_uses_the_quotas_cores() -> None:
    """Graded as Binder and JupyterHub grade: a cgroup limited to 1.5 cores, another process
    keeping a core busy under the same quota. The pass mark is this quota's, and the verdict
    names the other process's share of it; the solution is never failed for it."""
    with quota_or_skip(1.5) as cgroup:
        found = json.loads(run_under(cgroup, GRADE_SOLUTION, busy=True, timeout_s=280))
    verdict = found["verdict"]
    assert found["passed"] or not found["graded"], verdict
    assert set(found["quota_cores"]) == {1.5}
    quota = "the 1.5 cores of this container's CPU quota"
    assert f"needed on {quota})" in verdict or not found["graded"], verdict
    assert found["other_cores"] >= 0.5, found  # the busy process, under the same quota
    assert f"{found['other_cores']:.1f} of {quota} (" in verdict


def run(data_ms: float, batch_ms: float, busy: float) -> RunResult:
    """A reference run without workers whose loading kept the training thread busy for
    ``busy`` of its time (the sampler's figure for that thread)."""
    result = run_of([data_ms / 1e3] * 20, [batch_ms / 1e3] * 20)
    share = data_ms / (data_ms + batch_ms)
    thread = 100 * ((1 - share) + share * busy)
    return replace(result, system={"main_cpu_percent": thread, "train_thread_cpu_percent": thread})


@pytest.mark.parametrize(
    ("data_ms", "batch_ms", "busy", "cores", "expected"),
    [
        (280, 30, 0.05, 2, (280 + 30) / (30 + 280 * 0.05 / 2)),  # the assignment: storage waits
        (280, 30, 1.0, 1, (280 + 30) / (30 + 280)),  # all loading on the CPU, one core: 1x
        (100, 100, 0.0, 4, 2.0),  # a pure wait: the step's compute is what is left
    ],
)
def test_the_reach_hides_the_wait_and_spreads_the_loading_cpu_over_the_cores(
    data_ms: float, batch_ms: float, busy: float, cores: int, expected: float
) -> None:
    assert reach(run(data_ms, batch_ms, busy), cores) == pytest.approx(expected, rel=0.02)


def test_the_pass_mark_is_half_way_to_the_reach_and_at_most_2x() -> None:
    assert pass_mark([run(280, 30, 0.05)] * 3, cores=2) == MAX_PASS_MARK
    near = [run(100, 100, 0.5)] * 3  # reach 200 / (100 + 25) = 1.6x
    assert pass_mark(near, cores=2) == pytest.approx(1.3, rel=0.02)
    # A reference slowed by other work (batch_time 100 -> 200 ms) reaches less: the least
    # disturbed one sets the mark, so a busy machine does not lower it.
    disturbed = [run(100, 200, 0.5), run(100, 100, 0.5), run(100, 200, 0.5)]
    assert pass_mark(disturbed, cores=2) == pytest.approx(1.3, rel=0.02)


def test_under_a_quota_the_pass_mark_and_the_verdict_use_its_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The runs' own record of their quota sets the cores: 1.5, not the machine's 2; a verdict
    beside a busy process under the quota names its share of them."""
    from speedlab.analysis import compare
    from speedlab.assignments import grading

    monkeypatch.setattr(compare, "usable_cores", lambda: 2)
    quota = {"cores": 2, "samples": 10, "cpu_quota_cores": 1.5, "cgroup_cpu_percent": 150.0}

    def under_quota(result: RunResult) -> RunResult:
        return replace(result, system=replace(result.system, **quota))

    reference = [under_quota(run(100, 100, 0.5))] * 3  # reach 200 / (100 + 50 / 1.5) = 1.5x
    student = [under_quota(run(10, 100, 0.5))] * 3  # 200 / 110 = 1.8x
    result = grading._verdict(reference, student)
    assert result.passed and result.pass_mark == pytest.approx(1.25, rel=0.02)
    assert "x needed on the 1.5 cores of this container's CPU quota)" in str(result)
    others = f"{result.other_cores:.1f}"
    assert f"Other processes used {others} of the 1.5 cores of this container's CPU quota (" in (
        str(result)
    )
    slow = [under_quota(run(95, 100, 0.5))] * 3  # 1.03x: below the mark, beside the others
    declined = grading._verdict(reference, slow)
    assert not declined.graded and str(declined).startswith(
        f"CANNOT GRADE NOW: other processes used {others} of the 1.5 cores of this "
        "container's CPU quota ("
    )
