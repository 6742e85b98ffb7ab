"""What every doctor rule reads: the order of findings, and the few figures of a run that
several families of rules share (``Finding`` itself is a result: speedlab.results.findings).

Each family of rules (data, model, phases, stragglers...) has its own module; this one is the
bottom of them, so any rule module can import it and none needs another for the basics.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from speedlab.measure.devices import device_for
from speedlab.results.findings import KINDS, SEVERITIES, Finding
from speedlab.results.run import RankRecord, RunResult

STEPS_FOR_FIGURES = 5
"""Fewest steady steps before the figure-based rules say anything about a run (or a rank)."""


def device_name(run: RunResult) -> str:
    """The run's device as the texts name it (``Device.name``: ``GPU`` for CUDA)."""
    return device_for(run.device).name


def unique_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Each finding once (the same kind on the same evidence), in first-seen order."""
    return list({(f.kind, f.evidence): f for f in findings}.values())


def in_doctors_order(findings: Iterable[Finding]) -> list[Finding]:
    """The findings sorted by kind (the order of ``KINDS``), then by severity."""
    return sorted(findings, key=lambda f: (KINDS.index(f.kind), SEVERITIES.index(f.severity)))


# -- what a run is made of ----------------------------------------------------------------------


def torch_threads(run: RunResult) -> int:
    """torch's intra-op threads in the main process (``torch.get_num_threads()``)."""
    return int(run.system.torch_threads or 1)


def steady_values(run: RunResult, key: str) -> list[float]:
    """The records' ``key`` over the steady steps."""
    r = run.records
    return [v for v, p in zip(r[key], r["phase"], strict=True) if p == "steady"]


def batch_size(run: RunResult) -> int:
    """Samples per step (the batch size the run really used)."""
    samples = steady_values(run, "samples") or run.records["samples"]
    return int(statistics.median(samples)) if samples else 0


def differs(a: Mapping[str, Any], b: Mapping[str, Any]) -> set[str]:
    """The knobs set differently in two runs' ``knobs``."""
    return {k for k in set(a) | set(b) if a.get(k) != b.get(k)}


def rank_measured(rank: RankRecord) -> bool:
    """Whether a rank (an entry of ``run.ranks``) ran enough steady steps for the rules to read
    its figures."""
    figures = (rank.data_time, rank.batch_time, rank.work_time)
    return rank.steps >= STEPS_FOR_FIGURES and all(x is not None for x in figures)
