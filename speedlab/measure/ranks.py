"""Several devices and processes: per-rank records, gradient-sync time and the job's figures.

With DDP every rank is a process running its own copy of the SpeedProbe. ``RankRecorder`` is
the probe's distributed half; it times the gradient all-reduce and brings every rank's records
to one place, where ``job_result`` builds the job's RunResult: one entry per rank in ``ranks``,
throughput summed over the ranks, data_time the slowest rank's wait, batch_time the rest of the
job's step (which lasts as long as the longest rank's), so the job's figures add up as a run's.

How the records travel:

- **fork or spawn launches** (``ddp_notebook``, ``ddp_spawn``): the ranks are children of the
  process that built the probe (the notebook), whose callbacks never see the training loop.
  Each rank writes its records as JSON into a folder whose name the probe chose when it was
  built; ``probe.result()`` in the parent reads and removes it. Files rather than Lightning's
  launcher results: those come only from rank 0 and only when the fit succeeds, while the files
  bring every rank's records, the partial records of a failed run too, and need no change to
  Lightning's launcher.
- **script launches** (``ddp``, ``torchrun``, several nodes): every rank built its own probe. At
  the end of training the ranks exchange their records over the strategy's process group
  (``torch.distributed.all_gather_object``), so rank 0's ``probe.result()`` holds all of them,
  and rank 0 prints a summary.

Gradient synchronisation is timed with a DDP communication hook that wraps PyTorch's default
all-reduce: per step, from the first gradient bucket handed to the all-reduce to the last one
reduced. The slowest rank arrives last and waits for no one, so its sync time is the
communication itself; the other ranks' sync time also holds their wait for it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from speedlab.results.run import RankRecord, RunResult
from speedlab.results.system import SystemSummary
from speedlab.results.table import fmt_ms

STEP_KEYS = ("t", "data_time", "batch_time", "sync_time", "wall", "samples", "phase", "epoch")
"""Per-step lists in each ``RunResult.ranks`` entry's ``records``."""


def start_method(trainer: Any) -> str | None:
    """How the trainer's strategy starts its ranks (``fork``, ``spawn``, ...), None for scripts."""
    return getattr(getattr(trainer.strategy, "launcher", None), "_start_method", None)


# -- gradient synchronisation -------------------------------------------------------------------


class SyncTimer:
    """Times DDP's gradient all-reduce through a communication hook, one figure per step.

    The hook is PyTorch's default ``allreduce_hook`` with a timestamp on each side, so training
    computes the same gradients as without it. The reduced futures complete on the backend's
    thread before backward returns, so ``close_step`` after the step sees all of them.
    """

    def __init__(self) -> None:
        self.times: list[float] = []
        self._spans: list[tuple[float, float]] = []

    def hook(self, state, bucket):  # unannotated: DDP refuses any bucket type but GradBucket
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        start = time.perf_counter()

        def stamp(future: Any) -> Any:
            self._spans.append((start, time.perf_counter()))
            return future.value()

        return allreduce_hook(state, bucket).then(stamp)

    def close_step(self) -> None:
        """Record this step's sync time (0 for a step without gradient sync)."""
        spans, self._spans = self._spans, []
        self.times.append(max(e for _, e in spans) - min(s for s, _ in spans) if spans else 0.0)


def attach_sync_timer(trainer: Any) -> tuple[SyncTimer | None, str | None]:
    """A SyncTimer on the trainer's DDP model, or None and the reason it cannot be timed."""
    from torch.nn.parallel import DistributedDataParallel

    model = getattr(trainer.strategy, "model", None)
    name = getattr(trainer.strategy, "strategy_name", type(trainer.strategy).__name__)
    if not isinstance(model, DistributedDataParallel):
        return None, (
            f"Gradient synchronisation is not timed apart with strategy={name}: only DDP has the "
            "communication hook that times it; it is part of batch_time."
        )
    timer = SyncTimer()
    try:
        model.register_comm_hook(model.process_group, timer.hook)
    except RuntimeError:  # DDP takes one hook, and the user's strategy registered one
        return None, (
            "Gradient synchronisation is not timed apart: the strategy already registered a DDP "
            "communication hook (ddp_comm_hook), and DDP takes only one; it is part of batch_time."
        )
    return timer, None


# -- records of one rank ------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _steady_or_all(phases: Sequence[str]) -> list[int]:
    steady = [i for i, phase in enumerate(phases) if phase == "steady"]
    return steady or list(range(len(phases)))


def rank_entry(payload: dict[str, Any]) -> RankRecord:
    """One ``RunResult.ranks`` entry from a rank's payload: its figures (by the rule of
    ``RunResult.steady``: averages over the counted steady steps) and its step records.

    ``work_time`` is the rank's own work per step: data_time + batch_time - sync_time, what it
    would take if no rank waited for another.
    """
    result = RunResult.from_dict(payload["result"])
    r = result.records
    sync = payload.get("sync_time")
    records = {key: list(r[key]) for key in STEP_KEYS if key != "sync_time"}
    records["sync_time"] = list(sync) if sync is not None else None
    steady = list(result.steady.steps) or _steady_or_all(r["phase"])
    own = [r["wall"][i] - (sync[i] if sync else 0.0) for i in steady]
    return RankRecord(
        rank=payload["rank"],
        host=payload["host"],
        pid=payload["pid"],
        steps=result.steps,
        samples=result.samples,
        samples_per_s=_number(result.samples_per_s),
        data_time=_number(result.data_time),
        batch_time=_number(result.batch_time),
        sync_time=_mean([sync[i] for i in steady]) if sync else None,
        work_time=_mean(own),
        data_share=_number(result.data_share),
        error=payload.get("error"),
        system=result.system,
        records=records,
    )


def slowest_rank(ranks: Sequence[RankRecord]) -> RankRecord:
    """The rank with the most own work per step (the one the others wait for)."""
    return max(ranks, key=lambda e: (e.work_time or -1.0, -e.rank))


# -- the job ------------------------------------------------------------------------------------


def _job_records(slowest: RunResult, results: Sequence[RunResult]) -> dict[str, list]:
    """The slowest rank's steps, with every rank's samples and the longest wall of each step."""
    steps = [[r.records for r in results if i < r.steps] for i in range(slowest.steps)]
    return slowest.records | {
        "samples": [sum(rec["samples"][i] for rec in step) for i, step in enumerate(steps)],
        "wall": [max(rec["wall"][i] for rec in step) for i, step in enumerate(steps)],
    }


_PER_PROCESS = ("main_cpu_percent", "workers_cpu_percent", "peak_rss_bytes", "peak_workers")


def _job_system(results: Sequence[RunResult]) -> SystemSummary:
    """Machine-wide figures from rank 0; each process's own figures summed over the ranks."""
    systems = [r.system for r in results if r.system.sampled]
    if not systems:
        return SystemSummary()
    summed = {key: [getattr(s, key) for s in systems] for key in _PER_PROCESS}
    return dataclasses.replace(
        systems[0],
        **{
            key: sum(values)
            for key, values in summed.items()
            if all(isinstance(v, (int, float)) for v in values)
        },
    )


def _sync_note(ranks: Sequence[RankRecord], slowest: RankRecord) -> str | None:
    timed = [e for e in ranks if e.sync_time is not None]
    if not timed or len(timed) < len(ranks):
        return None
    comm = min(e.sync_time for e in timed)
    wait = max(e.sync_time for e in timed) - comm
    step = (slowest.data_time or 0.0) + (slowest.batch_time or 0.0)
    share = f", {comm / step:.0%} of the step" if step > 0 else ""
    return (
        f"Gradient synchronisation (DDP all-reduce, timed by a communication hook) takes "
        f"{fmt_ms(comm)} per step{share}; ranks that wait for the slowest spend up to {fmt_ms(wait)} "
        "more there."
    )


def job_result(payloads: Sequence[dict[str, Any]]) -> RunResult:
    """The job's RunResult from the payloads of its ranks (any order, some may be missing)."""
    payloads = sorted(payloads, key=lambda p: p["rank"])
    results = [RunResult.from_dict(p["result"]) for p in payloads]
    ranks = [rank_entry(p) for p in payloads]
    slow = slowest_rank(ranks)
    base = results[ranks.index(slow)]
    world = max(p["world_size"] for p in payloads)
    hosts = sorted({e.host for e in ranks})
    notes = [
        f"{world} ranks (processes) on {len(hosts)} host(s): samples/s is the sum over the ranks; "
        f"data_time and batch_time are rank {slow.rank}'s, the slowest (its own work "
        f"{fmt_ms(slow.work_time)} per step)."
        if world > 1
        else "Trained in one process started by the strategy; its records came back from there."
    ]
    missing = sorted(set(range(world)) - {e.rank for e in ranks})
    if missing:
        notes.append(
            f"Rank(s) {', '.join(map(str, missing))} sent no records: they ended before they "
            "could write them."
        )
    notes += [n for n in [_sync_note(ranks, slow)] if n]
    for p, result in zip(payloads, results):
        notes += [n for n in [p.get("sync_note"), *result.notes] if n and n not in notes]
    failed = sorted((p for p in payloads if p.get("error")), key=lambda p: p["failed_at"])
    return RunResult(
        records=_job_records(base, results),
        phases=dict(base.phases),
        system=_job_system(results),
        final_loss=results[0].final_loss,
        losses=list(results[0].losses),
        error=f"rank {failed[0]['rank']} failed: {failed[0]['error']}" if failed else None,
        notes=notes,
        wall_time=max(r.wall_time for r in results),
        device=results[0].device,
        ranks=ranks,
        workload=dict(results[0].workload),
        host_syncs=results[0].host_syncs,
    )


# -- the probe's distributed half ---------------------------------------------------------------


def _error_in_flight() -> BaseException | None:
    """The error a child rank is exiting with: torch.multiprocessing turns it into SystemExit."""
    error = sys.exc_info()[1]
    if isinstance(error, SystemExit):
        return error.__context__
    return error


class RankRecorder:
    """What SpeedProbe does beyond one process: sync timing, per-rank logging, record hand-over.

    Built with the probe, in the process that will ask for ``probe.result()``. In a rank that is
    a child of that process (fork/spawn) ``finish`` writes the rank's records for the parent;
    in a rank that built its own probe (scripts) ``finish`` gathers all ranks' records.

    A failing child rank runs no Lightning hook: the launcher calls the fit without Lightning's
    error handling, and ``torch.multiprocessing`` catches the error and exits. So a child also
    registers an exit handler with ``multiprocessing.util.Finalize`` (which the child's
    ``Process`` runs on its way out); it finishes the probe with the error the probe saw leave
    a step (``saw``; else the one then in flight), and the parent gets the failed rank's
    records up to the failure.
    """

    def __init__(self) -> None:
        self.owner_pid = os.getpid()
        self.handoff = Path(tempfile.gettempdir()) / f"speedlab-ranks-{uuid.uuid4().hex}"
        self.sync: SyncTimer | None = None
        self.sync_note: str | None = None
        self.rank, self.world_size = 0, 1
        self.error: BaseException | None = None  # the first error seen leaving a step, in a child
        self._on_exit: Any = None

    @property
    def in_child(self) -> bool:
        """Whether this is a rank process launched by the process that built the probe."""
        return os.getpid() != self.owner_pid

    def one_thread_if_forked(self, trainer: Any) -> None:
        """In a rank forked from the process that built the probe, before any training op:
        one torch thread (see ``FORKED_RANK_THREADS``). Spawned ranks start afresh and keep
        theirs."""
        if self.in_child and start_method(trainer) == "fork":
            import torch

            if torch.get_num_threads() > 1:
                torch.set_num_threads(1)

    def start(self, trainer: Any, fail: Callable[[BaseException | None], None]) -> None:
        """On train start: learn the rank, and time gradient sync when there are several.

        ``fail(error)`` finishes the probe after an error; a child rank calls it on its way out
        if training did not end normally.
        """
        self.rank, self.world_size = trainer.global_rank, trainer.world_size
        self.sync, self.sync_note = None, None
        if self.world_size > 1:
            self.sync, self.sync_note = attach_sync_timer(trainer)
        if self.in_child:
            self.report_on_exit(fail)

    def report_on_exit(self, fail: Callable[[BaseException | None], None]) -> None:
        """In a child rank: have ``fail(error)`` called as the process exits, unless ``finish``
        runs first; ``error`` is the one seen leaving a step (``saw``), else the one in flight.
        """
        from multiprocessing.util import Finalize

        self._on_exit = Finalize(
            None, lambda: fail(self.error or _error_in_flight()), exitpriority=100
        )

    def saw(self, error: BaseException) -> None:
        """Keep the first error seen on its way out of a step (the probe calls this from its
        wrappers of the loop's fetch and training calls). The exit handler reports
        it: since Python 3.13 that handler runs after the process's bootstrap has returned, when
        no error is in flight any more."""
        if self.error is None:
            self.error = error

    def log_metrics(self, trainer: Any, metrics: dict[str, float], steps: int) -> dict[str, float]:
        """Every rank's data_time/batch_time over the last ``steps`` (a collective: all ranks
        call it at the same step). The job's ``speedlab/data_time`` and ``batch_time`` become
        the slowest rank's.
        """
        if self.world_size == 1:
            return metrics
        import torch

        sync = statistics.median(self.sync.times[-steps:]) if self.sync else 0.0
        mine = torch.tensor(
            [metrics["speedlab/data_time"], metrics["speedlab/batch_time"], sync],
            dtype=torch.float64,
            device=trainer.strategy.root_device,
        )
        with warnings.catch_warnings():  # Lightning 2.6 calls an all_gather torch deprecated
            warnings.filterwarnings("ignore", message=".*all_gather is deprecated")
            table = trainer.strategy.all_gather(mine).reshape(-1, 3).tolist()
        out = {}
        for rank, (data, batch, sync) in enumerate(table):
            out |= {
                f"speedlab/rank_{rank}/data_time": data,
                f"speedlab/rank_{rank}/batch_time": batch,
            }
            if self.sync is not None:
                out[f"speedlab/rank_{rank}/sync_time"] = sync
        data, batch, _ = max(table, key=lambda row: row[0] + row[1] - row[2])
        return out | {"speedlab/data_time": data, "speedlab/batch_time": batch}

    def payload(self, result: RunResult, exception: BaseException | None) -> dict[str, Any]:
        error = None
        if exception is not None:
            error = (
                "interrupted"
                if isinstance(exception, KeyboardInterrupt)
                else f"{type(exception).__name__}: {exception}".strip()
            )
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "result": result.to_dict(),
            "sync_time": self.sync.times if self.sync is not None else None,
            "sync_note": self.sync_note,
            "error": error,
            "failed_at": time.time(),
        }

    def finish(self, result: RunResult, exception: BaseException | None) -> RunResult:
        """At the end of the fit on every rank: hand the records over; rank 0 gets the job.

        The exchange between ranks is a collective, so it only runs when training ended
        normally (every rank is there); after an error each rank keeps its own records.
        """
        if self.in_child:
            if self._on_exit is not None:
                self._on_exit.cancel()
            self._write(self.payload(result, exception))
            return result
        if self.world_size == 1:
            return result
        if exception is not None:
            return dataclasses.replace(
                result,
                ranks=[rank_entry(self.payload(result, exception))],
                notes=[
                    *result.notes,
                    f"Training failed, so the ranks did not exchange their records: this result "
                    f"holds rank {self.rank}'s only.",
                ],
            )
        import torch.distributed as dist

        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, self.payload(result, None))
        job = job_result(gathered)
        if self.rank == 0:
            print(f"speedlab: {len(job.ranks)} ranks\n{job.report()}", flush=True)
        return job

    def _write(self, payload: dict[str, Any]) -> None:
        self.handoff.mkdir(parents=True, exist_ok=True)
        part = self.handoff / f".rank-{self.rank}.part"
        part.write_text(json.dumps(payload))
        part.replace(self.handoff / f"rank-{self.rank}.json")  # the parent never reads half

    def ready(self) -> bool:
        """Whether rank processes left records for this (parent) process."""
        return not self.in_child and self.handoff.is_dir()

    def collect(self) -> RunResult | None:
        """The job's RunResult from the records the ranks left, which are then removed."""
        if not self.ready():
            return None
        try:
            payloads = [json.loads(p.read_text()) for p in sorted(self.handoff.glob("rank-*.json"))]
        finally:
            shutil.rmtree(self.handoff, ignore_errors=True)
        return job_result(payloads) if payloads else None
