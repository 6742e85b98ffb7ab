"""The doctor's rules that only several ranks show: the share of each step spent in gradient
synchronisation and CUDA initialised before a fork-based launch, gathered with the straggler
rank (analysis/stragglers.py, beside the straggler worker) by ``rank_findings``."""

from __future__ import annotations

import statistics

from speedlab.analysis.findings import rank_measured
from speedlab.analysis.stragglers import rank_straggler
from speedlab.measure.ranks import slowest_rank
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.table import fmt_ms

SYNC_SHARE_WARN = 0.20
"""Share of the step spent in gradient communication from which the doctor warns."""
SYNC_SHARE_CRITICAL = 0.50
"""Communication share that is critical: more time synchronising than computing."""
SYNC_BATCH_FACTOR = 4
"""How much larger a per-rank batch the doctor suggests against synchronisation overhead."""

_CUDA_FORK_ERRORS = (
    "Cannot re-initialize CUDA in forked subprocess",
    "can't create new processes if CUDA is already initialized",
)
"""The words of the errors of such a fork (speedlab's refusal comes first, and the run records
it as ``workload["cuda_before_fork"]``): torch's, in a forked rank that touches CUDA (Lightning
2.6 raises the same words before forking where torch says the process is a bad fork), and
Lightning's own, with a torch that cannot say."""


def _cuda_fork(run: RunResult) -> list[Finding]:
    error = run.error or ""
    known = any(words in error for words in _CUDA_FORK_ERRORS)
    if not error or ("cuda_before_fork" not in run.workload and not known):
        return []
    advice = (
        "In a notebook, ddp_notebook forks the notebook process into the ranks, and a forked "
        "process cannot use CUDA once its parent has initialised it. Restart the kernel; keep "
        "every GPU call inside the training code (the Trainer moves the model in each rank); "
        "or train from a script with strategy='ddp'."
    )
    summary = (
        "The run failed: CUDA was initialised before the ranks were forked; restart the kernel"
    )
    return [
        Finding(
            "notebook_trap", f"The run failed: {error}", advice, None, "critical", summary=summary
        )
    ]


def _sync_share(run: RunResult) -> list[Finding]:
    timed = [e for e in run.ranks if rank_measured(e) and e.sync_time is not None]
    if len(timed) < 2 or len(timed) < len(run.ranks):
        return []
    slow = slowest_rank(timed)
    comm = min(e.sync_time for e in timed)
    step = (slow.data_time or 0.0) + (slow.batch_time or 0.0)
    if step <= 0 or comm / step < SYNC_SHARE_WARN:
        return []
    severity = "critical" if comm / step >= SYNC_SHARE_CRITICAL else "warn"
    batch = round(statistics.median(slow.records["samples"]) or 1)
    evidence = (
        f"Gradient synchronisation takes {fmt_ms(comm)} of each {fmt_ms(step)} step "
        f"({comm / step:.0%}), even on rank {slow.rank}, which waits for no one."
    )
    advice = (
        "Each step exchanges every gradient, however little the ranks computed: more work per "
        "step makes the exchange a smaller share. Use larger batches per rank, or "
        "trainer.accumulate_grad_batches (DDP syncs only on the last of them). With CPU "
        "processes on one machine, fewer ranks with more threads each may be faster."
    )
    return [
        Finding(
            "overhead_bound",
            evidence,
            advice,
            "batch_size",
            severity,
            batch * SYNC_BATCH_FACTOR,
            f"Gradient synchronisation takes {comm / step:.0%} of each step",
        )
    ]


def rank_findings(run: RunResult) -> list[Finding]:
    """The doctor's findings that only several ranks show: a straggler rank, the share of time
    in gradient synchronisation, and CUDA initialised before a fork-based launch.

    A data-bound slowest rank needs no rule here: the job's figures are that rank's, so the
    doctor's own data-bound rules see it.
    """
    return _cuda_fork(run) + (rank_straggler(run) + _sync_share(run) if run.ranks else [])
