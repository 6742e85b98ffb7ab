"""Course assignments: make a deliberately slow pipeline faster, and prove it with numbers.

A student gets ``slow_pipeline()`` and a ``train()`` that uses it, and must make training
faster, past a pass mark this machine can reach, without changing the model, the data or the
number of samples seen. ``check(train)`` measures the reference and the student's version in
the same process, interleaved and repeated, and says PASS, FAIL or, when other processes took
the CPU a fail would be judged on, CANNOT GRADE NOW: usable in an nbgrader-style autograded
cell (deterministic seeds, a time limit, one clear message).

    from speedlab.assignments import check
    result = check(train)   # prints the verdict
    assert result.passed, result.message

One module per job: ``pipeline`` (the slow pipeline and its reference), ``pass_mark`` (what
this machine lets the intended fix reach), ``same_work`` (what a submission may not change)
and ``grading`` (the interleaved runs and the verdict).
"""

from speedlab.assignments.grading import FASTER_PIPELINE, Assignment, CheckResult, check
from speedlab.assignments.pipeline import LATENCY_S, reference_train, slow_pipeline

__all__ = [
    "FASTER_PIPELINE",
    "LATENCY_S",
    "Assignment",
    "CheckResult",
    "check",
    "reference_train",
    "slow_pipeline",
]
