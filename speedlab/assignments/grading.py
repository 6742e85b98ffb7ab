"""Grading: the reference and the submission measured in turn, and the verdict.

``check(train)`` runs the reference and ``train`` in pairs, alternating which goes first
(R S, S R, R S), so that drift and warm-up land on both alike; the speedup is the ratio of
their median samples/s. The pass mark comes from this machine (``pass_mark``). A submission
that changed the model or the data fails after the first pair (``same_work``).

Other processes' CPU is read from each run's system sampler. A speedup below the mark while
they used ``CONTENDED_CORES`` or more is not a fail: the verdict is "CANNOT GRADE NOW", with
the figures, and the student runs ``check()`` again on a quiet machine. A pass is a pass.

In a container with a CPU quota (Binder, JupyterHub) the cores are the quota's (1.5 cores, not
the host's count), and the other processes are those sharing the quota, as the runs' samplers
read them from the cgroup (``speedlab.analysis.compare.other_processes_cores``).
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from speedlab.analysis.compare import other_processes_cores, run_cpu
from speedlab.analysis.data import CONTENDED_CORES
from speedlab.assignments.pass_mark import pass_mark
from speedlab.assignments.pipeline import reference_train
from speedlab.assignments.same_work import changed
from speedlab.measure.machine import usable_cpu
from speedlab.results.knobs import Knobs
from speedlab.results.run import RunResult
from speedlab.results.stats import summarize
from speedlab.run.intercept import RunControls
from speedlab.run.sweep import run_once


@dataclass(frozen=True)
class Assignment:
    """What the student must reach, and how it is measured.

    Args:
        name: the assignment's name.
        reference: the untouched pipeline.
        steps: training steps of every run; the first ``warmup`` are left out.
        pairs: reference-and-submission pairs measured, alternating which runs first.
        time_limit_s: the longest a check may take.
    """

    name: str
    reference: Callable[[], None]
    steps: int = 30
    warmup: int = 5
    pairs: int = 3
    time_limit_s: float = 240.0


FASTER_PIPELINE = Assignment("faster-pipeline", reference_train)


@dataclass
class CheckResult:
    """The verdict and its figures.

    ``graded`` is False when the check could not judge fairly (other processes took the CPU,
    the reference failed): then ``passed`` is False too, but it is no fail.
    """

    passed: bool
    speedup: float
    message: str
    graded: bool = True
    pass_mark: float = math.nan
    other_cores: float = 0.0  # the most CPU (in cores) other processes used during a run
    reference: list[RunResult] = field(default_factory=list)
    student: list[RunResult] = field(default_factory=list)

    def __str__(self) -> str:
        head = "PASS" if self.passed else "FAIL" if self.graded else "CANNOT GRADE NOW"
        return f"{head}: {self.message}"

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
    with warnings.catch_warnings():
        # Six runs of what the student's own cells already ran, warnings and all (torch's about
        # more workers than cores, say): not again, and an autograder (nbgrader) scores any
        # output on stderr as a fail.
        warnings.simplefilter("ignore")
        results, _ = run_once(train, Knobs(), controls, fingerprint_data=True)
    return results[0]


def _problem(reference: RunResult, student: RunResult) -> CheckResult | None:
    """The verdict a pair already decides: a failed run, or a forbidden change."""
    if reference.error:
        return CheckResult(
            False, math.nan, f"the reference pipeline failed: {reference.error}", graded=False
        )
    if student.error:
        return CheckResult(False, math.nan, f"your train() failed: {student.error}")
    problem = changed(reference, student)
    if problem:
        return CheckResult(False, math.nan, f"{problem}. Make it faster without changing that.")
    return None


def check(train: Callable[[], None], assignment: Assignment = FASTER_PIPELINE) -> CheckResult:
    """Measure the reference and ``train`` in alternating pairs and judge the speedup."""
    deadline = time.monotonic() + assignment.time_limit_s
    reference: list[RunResult] = []
    student: list[RunResult] = []
    try:
        for pair in range(assignment.pairs):
            turns = [(assignment.reference, reference), (train, student)]
            for fn, runs in turns[:: -1 if pair % 2 else 1]:
                runs.append(_measure(fn, assignment, deadline))
            problem = _problem(reference[-1], student[-1])
            if problem is not None:
                problem.reference, problem.student = reference, student
                return problem
    except _OverTime:
        limit = f"the time limit of {assignment.time_limit_s:.0f} s came before all runs finished"
        return _fail_or_decline(reference, student, limit, "")
    return _verdict(reference, student)


def _verdict(reference: list[RunResult], student: list[RunResult]) -> CheckResult:
    cores, named = _cores(reference + student)
    mark = pass_mark(reference, cores)
    base = summarize([r.samples_per_s for r in reference]).median
    mine = summarize([r.samples_per_s for r in student]).median
    speedup = mine / base
    figures = (
        f"{mine:.0f} samples/s against {base:.0f} for the reference: {speedup:.2f}x "
        f"({mark:.2f}x needed on {named})"
    )
    if speedup < mark:
        return _fail_or_decline(reference, student, figures, " Look at data_time.", speedup, mark)
    others = _other_cores(reference + student)
    message = f"{figures}."
    if others >= CONTENDED_CORES:
        message += f" Other processes used {_share(others, cores, named)} meanwhile."
    return CheckResult(True, speedup, message, True, mark, others, reference, student)


def _cores(runs: list[RunResult]) -> tuple[float, str]:
    """The CPU the runs could use, in cores (a container's quota where it has one), and its
    name in a verdict."""
    cores = min(map(run_cpu, runs), default=usable_cpu())
    if any(r.system.cpu_quota_cores == cores for r in runs):
        return cores, f"the {cores:g} cores of this container's CPU quota"
    return cores, f"this machine's {cores:g} cores"


def _share(others: float, cores: float, named: str) -> str:
    """Other processes' share of the cores, in words: "0.9 of the 1.5 cores of this
    container's CPU quota (60%)"."""
    return f"{others:.1f} of {named} ({others / cores:.0%})"


def _other_cores(runs: list[RunResult]) -> float:
    """The most CPU, in cores, that other processes used during one of the runs."""
    return max(map(other_processes_cores, runs), default=0.0)


def _fail_or_decline(
    reference: list[RunResult],
    student: list[RunResult],
    measured: str,
    advice: str,
    speedup: float = math.nan,
    mark: float = math.nan,
) -> CheckResult:
    """A fail, or "cannot grade now" where other processes took the CPU meanwhile."""
    others = _other_cores(reference + student)
    if others < CONTENDED_CORES:
        message = f"{measured}.{advice}"
        return CheckResult(False, speedup, message, True, mark, others, reference, student)
    cores, named = _cores(reference + student)
    message = (
        f"other processes used {_share(others, cores, named)} during grading; close them and "
        f"run check() again. Measured meanwhile: {measured}."
    )
    return CheckResult(False, speedup, message, False, mark, others, reference, student)
