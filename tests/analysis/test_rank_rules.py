"""speedlab.analysis.ranks: the rules only several ranks show, here CUDA initialised before a
fork-based launch."""

from __future__ import annotations

import pytest

from speedlab.analysis.ranks import rank_findings
from speedlab.results.run import RunResult


@pytest.mark.parametrize(
    "error",
    [
        # torch's, in a forked rank (and Lightning 2.6's, which says the same where torch can tell)
        "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with "
        "multiprocessing, you must use the 'spawn' start method",
        # Lightning's own, with a torch that cannot tell a bad fork
        "RuntimeError: Lightning can't create new processes if CUDA is already initialized. Did "
        "you manually call `torch.cuda.*` functions",
    ],
)
def test_the_errors_of_cuda_initialised_before_a_fork_are_a_notebook_trap(error: str) -> None:
    (finding,) = rank_findings(RunResult(error=error))
    assert finding.kind == "notebook_trap" and finding.severity == "critical"
    assert "restart the kernel" in finding.summary


def test_another_error_is_not_called_a_cuda_fork() -> None:
    assert rank_findings(RunResult(error="RuntimeError: CUDA out of memory")) == []
