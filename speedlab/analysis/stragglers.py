"""The doctor's straggler rules: one DataLoader worker much slower than the others (from the
workers' batch stamps), and one rank much slower than the others (from the per-rank figures).

Both ask the same question of different figures, so they share one test (``slower``) and one
noise floor here, each with its own factor.
"""

from __future__ import annotations

import statistics

from speedlab.analysis.data import DATA_SHARE_WARN
from speedlab.analysis.findings import rank_measured
from speedlab.measure.ranks import slowest_rank
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.table import fmt, fmt_ms

WORKER_STRAGGLER_FACTOR = 2.0
"""A worker is a straggler when it takes this many times longer to make a batch than the
others (median times from the workers' batch stamps, ``records["pipeline"]``)."""
RANK_STRAGGLER_FACTOR = 1.3
"""A rank is a straggler when its own work per step (data + compute, without the wait in
gradient sync) is this many times the other ranks' median: the others wait for it every step.
Two ranks doing the same work on a shared machine differ by up to about 10%."""
STRAGGLER_MIN_S = 0.002
"""...and, worker or rank, at least this much longer (smaller gaps are scheduling noise)."""


def slower(value: float, others: float, factor: float) -> bool:
    """Whether ``value`` (seconds) is ``factor`` times ``others`` and beyond the noise floor."""
    return value >= factor * others and value - others >= STRAGGLER_MIN_S


def worker_straggler(run: RunResult) -> list[Finding]:
    """One worker making its batches much slower than the others (from the worker stamps)."""
    stamps = run.records.get("pipeline") or {}
    made: dict[int, list[float]] = {}
    for worker, start, end in zip(
        stamps.get("worker", []), stamps.get("start", []), stamps.get("end", []), strict=False
    ):
        made.setdefault(worker, []).append(end - start)
    if len(made) < 2:
        return []
    medians = {w: statistics.median(times) for w, times in made.items()}
    slow = max(medians, key=medians.__getitem__)
    others = statistics.median(m for w, m in medians.items() if w != slow)
    if not slower(medians[slow], others, WORKER_STRAGGLER_FACTOR):
        return []
    evidence = (
        f"Worker {slow} takes {fmt_ms(medians[slow])} to make a batch, the other "
        f"{len(made) - 1} worker(s) {fmt_ms(others)} (medians); batches are handed over in "
        f"turn, so one step in {len(made)} waits for worker {slow}."
    )
    advice = (
        "The slowest worker sets the pace. Look for what makes its samples slow (larger files, a "
        "heavier transform, a core it shares with other work). More workers dilute it; "
        "DataLoader(in_order=False) (PyTorch 2.6+) lets ready batches go first."
    )
    severity = "warn" if run.data_share >= DATA_SHARE_WARN else "info"
    summary = (
        f"Worker {slow} makes batches {medians[slow] / others:.1f}x slower than the others, "
        f"holding up one step in {len(made)}"
    )
    return [Finding("straggler", evidence, advice, "workers", severity, 2 * len(made), summary)]


def rank_straggler(run: RunResult) -> list[Finding]:
    """One rank whose own work per step is much longer than the others' (the per-rank figures):
    every rank waits for it at the gradient sync."""
    ranks = [e for e in run.ranks if rank_measured(e)]
    if len(ranks) < 2:
        return []
    slow = slowest_rank(ranks)
    others = [e for e in ranks if e is not slow]
    work = statistics.median(e.work_time for e in others)
    if not slower(slow.work_time, work, RANK_STRAGGLER_FACTOR):
        return []
    data = statistics.median(e.data_time for e in others)
    compute = statistics.median(e.batch_time - (e.sync_time or 0.0) for e in others)
    slow_compute = slow.batch_time - (slow.sync_time or 0.0)
    evidence = (
        f"Rank {slow.rank} needs {fmt_ms(slow.work_time)} of its own work per step (data "
        f"{fmt_ms(slow.data_time)}, compute {fmt_ms(slow_compute)}); the other ranks need "
        f"{fmt_ms(work)} (data {fmt_ms(data)}, compute {fmt_ms(compute)}). Every step waits for rank "
        f"{slow.rank} at the gradient sync."
    )
    if slower(slow.data_time, data, RANK_STRAGGLER_FACTOR):
        advice = (
            f"Rank {slow.rank}'s data loading is slower (data is "
            f"{fmt(slow.data_share, '.0%')} of its step): look at what makes its shard slow "
            "(larger files, slower storage, a heavier transform, a busy core). More DataLoader "
            "workers per rank help when cores are free."
        )
        summary = (
            f"Rank {slow.rank}'s data loading makes every rank wait at each step "
            f"({slow.work_time / work:.1f}x the others' work)"
        )
        return [Finding("straggler", evidence, advice, "workers", "warn", 2, summary)]
    advice = (
        f"Rank {slow.rank}'s compute is slower: a slower or busier device (another process on "
        "its GPU or cores, thermal throttling), or more work in its batches (longer sequences). "
        "The job runs at the pace of its slowest rank."
    )
    summary = (
        f"Rank {slow.rank}'s compute makes every rank wait at each step "
        f"({slow.work_time / work:.1f}x the others' work); look at its device"
    )
    return [Finding("straggler", evidence, advice, None, "warn", summary=summary)]
