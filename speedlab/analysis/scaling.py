"""Scaling efficiency: a run with N processes against the same run on one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from speedlab.measure.machine import usable_cores
from speedlab.results.run import RunResult


@dataclass(frozen=True)
class Scaling:
    """How a run with N processes compares with the same run on one."""

    run: RunResult
    reference: RunResult
    processes: int

    @property
    def speedup(self) -> float:
        return self.run.samples_per_s / self.reference.samples_per_s

    @property
    def efficiency(self) -> float:
        """throughput(N) / (N x throughput(1)): 100% is perfect scaling."""
        return self.speedup / self.processes

    def __str__(self) -> str:
        return (
            f"{self.processes} processes: {self.speedup:.2f}x the samples/s of one, scaling "
            f"efficiency {self.efficiency:.0%} (100% = {self.processes}x)."
        )


def processes_of(run: RunResult) -> int:
    return max(1, len(run.ranks))


def scaling(runs: Sequence[RunResult]) -> list[Scaling]:
    """Each multi-process run against the one-process run with the same other knobs."""

    def others(run: RunResult) -> dict[str, Any]:
        return {k: v for k, v in run.knobs.items() if k not in ("devices", "strategy")}

    done = [r for r in runs if r.ok and r.samples_per_s > 0]
    out = []
    for run in done:
        n = processes_of(run)
        reference = next(
            (r for r in done if processes_of(r) == 1 and others(r) == others(run)), None
        )
        if n > 1 and reference is not None:
            out.append(Scaling(run, reference, n))
    return out


def scaling_notes(found: Sequence[Scaling]) -> list[str]:
    """What a sweep with these scaled runs says of scaling: how efficiency is read, and why
    CPU processes fall short of N times."""
    if not any(item.run.device == "cpu" for item in found):
        return []
    return [
        f"Scaling efficiency = samples/s with N processes / (N x samples/s with 1). The CPU "
        f"processes here share {usable_cores()} cores: Lightning gives spawned ranks (and a "
        "script's) cores/N torch threads each unless OMP_NUM_THREADS is set, so N ranks only "
        "gain where one process left cores idle (per-step overhead, waiting for data); ranks "
        "forked from a notebook (ddp_notebook) train on 1 thread each, which speedlab sets as "
        "OpenMP can hang in a forked process, so they may use fewer cores than one process "
        "did. Gradient synchronisation and the ranks' data loading take their part on top. On "
        "N GPUs each rank has a device of its own."
    ]
