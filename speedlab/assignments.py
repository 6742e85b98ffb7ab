"""Course assignments: make a deliberately slow pipeline faster, and prove it with numbers.

A student gets ``slow_pipeline()`` and a ``train()`` that uses it, and must make training at
least ``min_speedup`` times faster without changing the model, the data or the number of
samples seen. ``check(train)`` measures the reference and the student's version in the same
process, interleaved and repeated, and says pass or fail with the figures: usable in an
nbgrader-style autograded cell (deterministic seeds, a time limit, one clear message).

    from speedlab.assignments import check
    result = check(train)   # prints the verdict
    assert result.passed, result.message
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from speedlab.results.run import RunResult
from speedlab.results.stats import summarize
from speedlab.run.intercept import RunControls
from speedlab.run.knobs import Knobs
from speedlab.run.sweep import run_once

#: Slow storage of the assignment: every image waits this long before its first byte.
LATENCY_S = 0.008


def slow_pipeline() -> tuple[Any, Any]:
    """The assignment's model and data: the image lab on slow storage, loading in the main process."""
    from speedlab.labs import ThrottledOpener, image_lab

    return image_lab(
        throttle=ThrottledOpener(bytes_per_s=math.inf, latency_s=LATENCY_S), num_workers=0
    )


def reference_train() -> None:
    """The untouched pipeline: what the student's version is measured against."""
    import lightning.pytorch as pl

    from speedlab.labs import QUIET_TRAINER

    model, data = slow_pipeline()
    trainer = pl.Trainer(
        max_epochs=1,
        limit_val_batches=0,
        **QUIET_TRAINER,
    )
    trainer.fit(model, data)


@dataclass(frozen=True)
class Assignment:
    """What the student must reach, and how it is measured."""

    name: str
    reference: Callable[[], None]
    min_speedup: float = 2.0
    steps: int = 30
    warmup: int = 5
    repeat: int = 2
    time_limit_s: float = 240.0


FASTER_PIPELINE = Assignment("faster-pipeline", reference_train)


@dataclass
class CheckResult:
    """The verdict: ``passed``, the measured ``speedup`` and a ``message`` that says why."""

    passed: bool
    speedup: float
    message: str
    reference: list[RunResult] = field(default_factory=list)
    student: list[RunResult] = field(default_factory=list)

    def __str__(self) -> str:
        return ("PASS: " if self.passed else "FAIL: ") + self.message

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(str(self))


class _OverTime(Exception):
    pass


def _measure(train: Callable[[], None], assignment: Assignment, deadline: float) -> RunResult:
    import lightning.pytorch as pl

    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _OverTime
    pl.seed_everything(0, verbose=False)
    controls = RunControls(steps=assignment.steps, time=remaining, warmup=assignment.warmup)
    results, _ = run_once(train, Knobs(), controls)
    return results[0]


def _changed(reference: RunResult, student: RunResult) -> str | None:
    """What the student changed that the assignment forbids, in one sentence; None if nothing."""
    ref, got = reference.workload, student.workload
    if (ref.get("model"), ref.get("parameters")) != (got.get("model"), got.get("parameters")):
        return (
            f"the model changed ({got.get('model')} with {got.get('parameters')} parameters; "
            f"expected {ref.get('model')} with {ref.get('parameters')})"
        )
    if ref.get("dataset_len") != got.get("dataset_len"):
        return f"the data changed ({got.get('dataset_len')} training samples; expected {ref.get('dataset_len')})"
    if student.samples != reference.samples:
        return (
            f"the number of samples seen changed ({student.samples}; expected {reference.samples})"
        )
    return None


def check(train: Callable[[], None], assignment: Assignment = FASTER_PIPELINE) -> CheckResult:
    """Measure the reference and ``train`` side by side and say whether the speedup is reached."""
    deadline = time.monotonic() + assignment.time_limit_s
    reference: list[RunResult] = []
    student: list[RunResult] = []
    try:
        for _ in range(assignment.repeat):
            reference.append(_measure(assignment.reference, assignment, deadline))
            student.append(_measure(train, assignment, deadline))
    except _OverTime:
        return CheckResult(
            False,
            math.nan,
            f"time limit of {assignment.time_limit_s:.0f} s reached before all runs finished.",
            reference,
            student,
        )
    failed = next((r for r in student if r.error), None)
    if failed is not None:
        return CheckResult(
            False, math.nan, f"your train() failed: {failed.error}", reference, student
        )
    problem = _changed(reference[0], student[0])
    if problem:
        return CheckResult(
            False, math.nan, f"{problem}. Make it faster without changing that.", reference, student
        )
    base = summarize([r.samples_per_s for r in reference]).median
    mine = summarize([r.samples_per_s for r in student]).median
    speedup = mine / base
    figures = f"{mine:.0f} samples/s against {base:.0f} for the reference: {speedup:.2f}x"
    if speedup >= assignment.min_speedup:
        return CheckResult(
            True, speedup, f"{figures} (needed {assignment.min_speedup:.1f}x).", reference, student
        )
    return CheckResult(
        False,
        speedup,
        f"{figures}; {assignment.min_speedup:.1f}x is needed. Look at data_time.",
        reference,
        student,
    )
