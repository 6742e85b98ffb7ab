"""The doctor's rules that only several ranks show: a straggler rank, the share of each step
spent in gradient synchronisation, and CUDA initialised before a fork-based launch."""

from __future__ import annotations

import statistics
from typing import Any

from speedlab.analysis.doctor import STEPS_FOR_FIGURES, Finding
from speedlab.measure.ranks import slowest_rank
from speedlab.results.run import RunResult
from speedlab.results.table import fmt, fmt_ms

STRAGGLER_FACTOR = 1.3
"""A rank is a straggler when its own work per step (data + compute, without the wait in
gradient sync) is this many times the other ranks' median: the others wait for it every step.
Two ranks doing the same work on a shared machine differ by up to about 10%."""
STRAGGLER_MIN_S = 0.002
"""...and at least this much longer (smaller gaps are scheduling noise)."""
SYNC_SHARE_WARN = 0.20
"""Share of the step spent in gradient communication from which the doctor warns."""
SYNC_SHARE_CRITICAL = 0.50
"""Communication share that is critical: more time synchronising than computing."""
SYNC_BATCH_FACTOR = 4
"""How much larger a per-rank batch the doctor suggests against synchronisation overhead."""

_CUDA_FORK_MARKERS = (
    "CUDA is already initialised in this process",
    "can't create new processes if CUDA is already initialized",
)


def _cuda_fork(run: RunResult) -> list[Finding]:
    error = run.error or ""
    if not any(marker in error for marker in _CUDA_FORK_MARKERS):
        return []
    advice = (
        "In a notebook, ddp_notebook forks the notebook process into the ranks, and a forked "
        "process cannot use CUDA once its parent has initialised it. Restart the kernel; keep "
        "every GPU call inside the training code (the Trainer moves the model in each rank); "
        "or train from a script with strategy='ddp'."
    )
    return [Finding("notebook_trap", f"The run failed: {error}", advice, None, "critical")]


def _measured(entry: dict[str, Any]) -> bool:
    """Whether a rank ran enough steady steps for the rules to read its figures."""
    keys = ("data_time", "batch_time", "work_time")
    return entry["steps"] >= STEPS_FOR_FIGURES and all(entry[k] is not None for k in keys)


def _straggler(run: RunResult) -> list[Finding]:
    ranks = [e for e in run.ranks if _measured(e)]
    if len(ranks) < 2:
        return []
    slow = slowest_rank(ranks)
    others = [e for e in ranks if e is not slow]
    work = statistics.median(e["work_time"] for e in others)
    if not _slower(slow["work_time"], work):
        return []
    data = statistics.median(e["data_time"] for e in others)
    compute = statistics.median(e["batch_time"] - (e["sync_time"] or 0.0) for e in others)
    slow_compute = slow["batch_time"] - (slow["sync_time"] or 0.0)
    evidence = (
        f"Rank {slow['rank']} needs {fmt_ms(slow['work_time'])} of its own work per step (data "
        f"{fmt_ms(slow['data_time'])}, compute {fmt_ms(slow_compute)}); the other ranks need "
        f"{fmt_ms(work)} (data {fmt_ms(data)}, compute {fmt_ms(compute)}). Every step waits for rank "
        f"{slow['rank']} at the gradient sync."
    )
    if _slower(slow["data_time"], data):
        advice = (
            f"Rank {slow['rank']}'s data loading is slower (data is "
            f"{fmt(slow['data_share'], '.0%')} of its step): look at what makes its shard slow "
            "(larger files, slower storage, a heavier transform, a busy core). More DataLoader "
            "workers per rank help when cores are free."
        )
        return [Finding("straggler", evidence, advice, "workers", "warn", 2)]
    advice = (
        f"Rank {slow['rank']}'s compute is slower: a slower or busier device (another process on "
        "its GPU or cores, thermal throttling), or more work in its batches (longer sequences). "
        "The job runs at the pace of its slowest rank."
    )
    return [Finding("straggler", evidence, advice, None, "warn")]


def _slower(value: float, others: float) -> bool:
    return value >= STRAGGLER_FACTOR * others and value - others >= STRAGGLER_MIN_S


def _sync_share(run: RunResult) -> list[Finding]:
    timed = [e for e in run.ranks if _measured(e) and e["sync_time"] is not None]
    if len(timed) < 2 or len(timed) < len(run.ranks):
        return []
    slow = slowest_rank(timed)
    comm = min(e["sync_time"] for e in timed)
    step = (slow["data_time"] or 0.0) + (slow["batch_time"] or 0.0)
    if step <= 0 or comm / step < SYNC_SHARE_WARN:
        return []
    severity = "critical" if comm / step >= SYNC_SHARE_CRITICAL else "warn"
    batch = round(statistics.median(slow["records"]["samples"]) or 1)
    evidence = (
        f"Gradient synchronisation takes {fmt_ms(comm)} of each {fmt_ms(step)} step "
        f"({comm / step:.0%}), even on rank {slow['rank']}, which waits for no one."
    )
    advice = (
        "Each step exchanges every gradient, however little the ranks computed: more work per "
        "step makes the exchange a smaller share. Use larger batches per rank, or "
        "trainer.accumulate_grad_batches (DDP syncs only on the last of them). With CPU "
        "processes on one machine, fewer ranks with more threads each may be faster."
    )
    return [
        Finding(
            "overhead_bound", evidence, advice, "batch_size", severity, batch * SYNC_BATCH_FACTOR
        )
    ]


def rank_findings(run: RunResult) -> list[Finding]:
    """The doctor's findings that only several ranks show: a straggler rank, the share of time
    in gradient synchronisation, and CUDA initialised before a fork-based launch.

    A data-bound slowest rank needs no rule here: the job's figures are that rank's, so the
    doctor's own data-bound rules see it.
    """
    return _cuda_fork(run) + (_straggler(run) + _sync_share(run) if run.ranks else [])
