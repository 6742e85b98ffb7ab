"""Course assignments: make a deliberately slow pipeline faster, and prove it with numbers.

A student gets ``slow_pipeline()`` and a ``train()`` that uses it, and must make training
faster, past a pass mark this machine can reach, without changing the model, the data or the
number of samples seen. ``check(train)`` measures the reference and the student's version in
the same process, interleaved and repeated, and says PASS, FAIL or, when other processes took
the CPU a fail would be judged on, CANNOT GRADE NOW. ``assert_passed`` turns the verdict into
what an autograded cell or test needs (nbgrader, otter-grader, a plain notebook): nothing on
PASS, an AssertionError with the figures on FAIL, a ``CannotGradeNow`` error otherwise.

    from speedlab.assignments import assert_passed, check
    result = check(train)
    print(result)
    assert_passed(result)

One module per job: ``pipeline`` (the slow pipeline and its reference), ``pass_mark`` (what
this machine lets the intended fix reach), ``same_work`` (what a submission may not change),
``grading`` (the interleaved runs and the verdict) and ``autograder`` (the verdict as a
grader's points).
"""

from speedlab.assignments.autograder import CannotGradeNow, assert_passed
from speedlab.assignments.grading import FASTER_PIPELINE, Assignment, CheckResult, check
from speedlab.assignments.pipeline import LATENCY_S, reference_train, slow_pipeline

__all__ = [
    "FASTER_PIPELINE",
    "LATENCY_S",
    "Assignment",
    "CannotGradeNow",
    "CheckResult",
    "assert_passed",
    "check",
    "reference_train",
    "slow_pipeline",
]
