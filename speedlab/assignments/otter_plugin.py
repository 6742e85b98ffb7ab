"""otter-grader's side of ``autograder.refuse_ungraded``: otter has no "not graded", so a check
that could not grade fairly makes the grading of that submission an error, instead of a zero
that reads as a fail.

Only otter-grader imports this module (the master notebook's ``plugins``).
"""

from __future__ import annotations

from typing import Any

from otter.plugins import AbstractOtterPlugin
from otter.run.run_autograder.utils import OtterRuntimeError

from speedlab.assignments.autograder import CannotGradeNow

#: How otter's exception-based tests report the error a test raised: "...\nNAME: message".
DECLINED = f"\n{CannotGradeNow.__name__}: "


class RefuseUngraded(AbstractOtterPlugin):
    """After otter ran the tests: an error, with the check's message, where one declined."""

    def after_grading(self, results: Any) -> None:
        for test_file in results.results.values():
            for case in test_file.test_case_results:
                if not case.passed and DECLINED in case.message:
                    reason = case.message.split(DECLINED, 1)[1]
                    raise OtterRuntimeError(f"{CannotGradeNow.__name__}: {reason}")
