"""What a grader makes of a verdict: full points for PASS, zero with the figures for FAIL, and
no grade at all for CANNOT GRADE NOW.

``assert_passed(result)`` ends the autograded cell of every version of the assignment (the plain
notebook, nbgrader's autograder cell, otter-grader's test): it returns on PASS, raises
``AssertionError`` with the figures on FAIL, and ``CannotGradeNow`` when other processes took the
CPU a fail would be judged on. A grader that scores any error as zero would score that too, so
``refuse_ungraded``, a step of ``nbgrader autograde``, makes it an error of the autograde run
itself: nbgrader names the submission, keeps no autograded copy and leaves its grade to be done,
and the next ``nbgrader autograde`` grades it again. ``otter_plugin`` does the same in
otter-grader.
"""

from __future__ import annotations

from typing import Any

from speedlab.assignments.grading import CheckResult

GRADE_AGAIN = (
    "Nothing was graded, so this is no fail: grade it again when no other work uses the CPU."
)


class CannotGradeNow(RuntimeError):
    """check() could not judge fairly (other processes took the CPU): nothing was graded."""


def assert_passed(result: CheckResult) -> None:
    """Return on PASS; raise AssertionError (FAIL) or CannotGradeNow, with the verdict."""
    if result.passed:
        return
    if result.graded:
        raise AssertionError(str(result))
    raise CannotGradeNow(f"{result} {GRADE_AGAIN}")


def refuse_ungraded(nb: Any, resources: Any) -> tuple[Any, Any]:
    """An ``nbgrader autograde`` step, after it runs the notebook: a check that raised
    CannotGradeNow fails the grading of this submission, with its message, instead of scoring
    a zero that reads as a fail."""
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("ename") == CannotGradeNow.__name__:
                raise CannotGradeNow(
                    f"{output.get('evalue')} This submission was not autograded: run nbgrader "
                    "autograde again on a quiet machine (it grades what is not graded yet)."
                )
    return nb, resources
