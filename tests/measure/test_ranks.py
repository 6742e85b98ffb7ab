"""Several processes: real 2-rank DDP on CPU (gloo) from a notebook cell and from a script.

Per-rank records, the job's figures, stragglers, gradient-sync time, scaling efficiency, a
failing rank, and the doctor's distributed rules.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import psutil
import pytest
import torch
from lightning.fabric.plugins.environments import MPIEnvironment

from speedlab.analysis.ranks import rank_findings
from speedlab.analysis.scaling import scaling
from speedlab.measure.machine import usable_cores
from speedlab.measure.ranks import job_result, slowest_rank
from speedlab.results.run import RunResult
from speedlab.run.forking import CudaBeforeForkError, check_fork

# Each test takes seconds; a rank that hangs fails its test in 2 minutes, not pytest's 5.
pytestmark = [pytest.mark.forks, pytest.mark.timeout(120)]

EXAMPLE = Path(__file__).parents[2] / "examples" / "ddp_script.py"

SETUP = """
import os, time
import lightning.pytorch as pl
from torch.utils.data import DataLoader
from speedlab.labs import KnownCostDataset, KnownCostModel
QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

class SlowRank(KnownCostDataset):
    # every sample of rank `slow` waits `delay_s` longer: a slow disk on one machine
    def __init__(self, n, slow=None, delay_s=0.0):
        super().__init__(n)
        self.slow, self.delay_s = slow, delay_s
    def __getitem__(self, i):
        if int(os.environ.get("LOCAL_RANK", 0)) == self.slow:
            time.sleep(self.delay_s)
        return super().__getitem__(i)
"""

CELL = """
trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET)
trainer.fit(KnownCostModel(step_s=0.002), DataLoader(SlowRank(4000, {slow}, 0.003), batch_size=8))
"""

FAILING_CELL = """
class Broken(KnownCostModel):
    def training_step(self, batch, batch_idx):
        if batch_idx == 5 and self.global_rank == 1:
            raise ZeroDivisionError("cell bug")
        return super().training_step(batch, batch_idx)
trainer = pl.Trainer(max_steps=20, accelerator="cpu", **QUIET)
trainer.fit(Broken(step_s=0.001), DataLoader(KnownCostDataset(800), batch_size=8, num_workers=1))
"""


@pytest.fixture
def shell(shell):
    """The shared shell, with the cell's imports run."""
    shell.run_cell(SETUP)
    return shell


@pytest.fixture
def descendants() -> Callable[[], list[psutil.Process]]:
    """This process's children born during the test and still alive; older ones (such as
    multiprocessing's resource tracker) are not the test's. Lightning's MPI detection runs
    first: where mpi4py is installed it initialises MPI, and Open MPI starts its daemon
    (``orted``) for the life of the process, a helper of the process rather than of the run."""
    MPIEnvironment.detect()
    older = set(psutil.Process().children(recursive=True))
    return lambda: [p for p in psutil.Process().children(recursive=True) if p not in older]


# -- real DDP from a notebook cell --------------------------------------------------------------


def test_ddp_notebook_ranks_come_back_with_job_figures_and_scaling(shell, descendants) -> None:
    assert not torch.cuda.is_initialized()  # tests that fork run before any that could
    sweep = shell.run_cell_magic(
        "profile_train",
        "--devices 1,2 --strategy ddp_notebook --steps 30 -o",
        CELL.format(slow=None),
    )
    one, two = sweep.runs
    assert one.ok and two.ok, (one.error, two.error)
    assert [len(one.ranks), len(two.ranks)] == [1, 2]
    assert [e.rank for e in two.ranks] == [0, 1]
    for entry in one.ranks + two.ranks:
        assert entry.steps == 30 and len(entry.records["data_time"]) == 30
        assert entry.samples_per_s > 0 and entry.batch_time > 0
    assert one.ranks[0].sync_time is None  # one rank: nothing to synchronise with
    for entry in two.ranks:
        assert len(entry.records["sync_time"]) == 30 and entry.sync_time > 0
    # the job: every rank's samples, times from the slowest rank
    assert two.samples == sum(e.samples for e in two.ranks) == 2 * 30 * 8
    # ranks in step (one all-reduce a step): the job rate is about the sum of the ranks' rates
    assert two.samples_per_s == pytest.approx(sum(e.samples_per_s for e in two.ranks), rel=0.2)
    slow = slowest_rank(two.ranks)
    assert two.data_time == pytest.approx(slow.data_time)
    assert two.batch_time >= slow.batch_time  # the job's step is as long as its longest rank's
    assert two.samples_per_s == pytest.approx(16 / two.step_time)
    assert any("slowest" in n for n in two.notes) and any("all-reduce" in n for n in two.notes)
    (item,) = scaling(sweep.runs)
    assert item.run is two and item.reference is one
    assert item.efficiency == pytest.approx(two.samples_per_s / (2 * one.samples_per_s))
    assert any(n.startswith("scaling: 2 processes") for n in two.notes)
    assert any(f"share {usable_cores()} cores" in n for n in sweep.notes)
    assert "per rank" in two.report()
    assert descendants() == []


@pytest.mark.timeout(180)
def test_ranks_forked_after_parallel_work_in_the_notebook_do_not_hang(
    shell, monkeypatch, descendants
) -> None:
    # GNU OpenMP hangs in a child forked after the parent ran a parallel region, at the child's
    # first parallel op, unless the child uses one thread. OMP_NUM_THREADS=2 stops Lightning
    # from lowering the ranks' threads itself: without speedlab's fix this cell never ends.
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    threads = torch.get_num_threads()
    try:  # the notebook's own setting, not speedlab's: the test puts it back
        shell.run_cell(
            "import torch; torch.set_num_threads(2); torch.ones(512, 512) @ torch.ones(512, 512)"
        )
        sweep = shell.run_cell_magic(
            "profile_train",
            "--devices 2 --strategy ddp_notebook --steps 20 -o",
            CELL.format(slow=None),
        )
    finally:
        torch.set_num_threads(threads)
    run = sweep.runs[0]
    assert run.ok, run.error
    assert [e.steps for e in run.ranks] == [20, 20]
    assert any("Each forked rank trains with 1 torch thread" in n for n in run.notes)
    assert descendants() == []


def test_a_rank_with_a_slow_data_loader_is_named_a_straggler(shell) -> None:
    sweep = shell.run_cell_magic(
        "profile_train", "--devices 2 --strategy ddp_notebook --steps 30 -o", CELL.format(slow=1)
    )
    run = sweep.runs[0]
    assert run.ok, run.error
    assert slowest_rank(run.ranks).rank == 1
    fast, slow = run.ranks
    assert slow.data_time > 0.02 > fast.data_time  # 8 samples x 3 ms on rank 1 only
    assert fast.sync_time > slow.sync_time  # rank 0 waits for rank 1 in the all-reduce
    assert run.data_time == slow.data_time
    (finding,) = [f for f in rank_findings(run) if f.kind == "straggler"]
    assert finding.evidence.startswith("Rank 1 needs")
    assert "Rank 1's data loading is slower" in finding.advice and finding.knob == "workers"


def test_a_failing_rank_is_a_clear_error_leaves_nothing_and_the_next_run_works(
    shell, capsys, descendants
) -> None:
    sweep = shell.run_cell_magic(
        "profile_train", "--devices 2 --strategy ddp_notebook -o", FAILING_CELL
    )
    run = sweep.runs[0]
    assert run.error == "rank 1 failed: ZeroDivisionError: cell bug"
    # the failed rank's records up to its failure came back, with its own error
    failed = next(e for e in run.ranks if e.rank == 1)
    assert failed.error == "ZeroDivisionError: cell bug" and failed.steps == 5
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out)
    assert "ZeroDivisionError: cell bug" in out
    assert descendants() == []
    again = shell.run_cell_magic(
        "profile_train", "--devices 2 --strategy ddp_notebook --steps 8 -o", CELL.format(slow=None)
    )
    assert again.runs[0].ok and len(again.runs[0].ranks) == 2
    assert descendants() == []


# -- real DDP from a script ---------------------------------------------------------------------


def test_example_script_trains_two_processes_logs_every_rank_and_prints_a_summary(
    tmp_path: Path,
) -> None:
    out = tmp_path / "result.json"
    command = [sys.executable, str(EXAMPLE), "--devices", "2", "--steps", "20", "--slow-rank", "1"]
    command += ["--logdir", str(tmp_path / "logs"), "--json", str(out)]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, text=True, timeout=100, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("speedlab: 2 ranks") == 1  # printed once, by rank 0
    assert "straggler: Rank 1's data loading makes every rank wait" in done.stdout
    assert "\n    Rank 1 needs" in done.stdout  # the evidence under the headline
    result = RunResult.from_dict(json.loads(out.read_text()))
    assert [e.rank for e in result.ranks] == [0, 1]
    assert all(len(e.records["batch_time"]) == 20 for e in result.ranks)
    assert result.samples == 2 * 20 * 64
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")
    header = next(csv.reader(metrics.open()))
    for key in ("data_time", "batch_time", "sync_time"):
        assert f"speedlab/rank_0/{key}" in header and f"speedlab/rank_1/{key}" in header
    assert [
        p for p in psutil.process_iter(["cmdline"]) if str(EXAMPLE) in (p.info["cmdline"] or [])
    ] == []


# -- CUDA before a fork -------------------------------------------------------------------------


def test_cuda_initialised_before_a_fork_is_refused_and_explained() -> None:
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp_notebook", logger=False)
    with pytest.raises(CudaBeforeForkError) as info:
        check_fork(trainer, cuda_initialized=lambda: True)
    message = str(info.value)
    assert "starts its ranks with fork" in message and "Restart the kernel" in message
    check_fork(trainer, cuda_initialized=lambda: False)
    check_fork(pl.Trainer(accelerator="cpu", logger=False), cuda_initialized=lambda: True)
    assert info.value.start_method == "fork"
    # The finding comes from the fact the fit records, not from the words of the refusal.
    error = f"CudaBeforeForkError: {message}"
    assert rank_findings(RunResult(error=error)) == []
    fact = {"cuda_before_fork": {"start_method": "fork"}}
    (finding,) = rank_findings(RunResult(error=error, workload=fact))
    assert finding.kind == "notebook_trap" and finding.severity == "critical"


# -- the job and the doctor's rules, from rank payloads -----------------------------------------


def payload(rank: int, data: float, batch: float, sync: float, steps: int = 20) -> dict:
    """What a rank hands over: its own RunResult and its sync times, all steps alike."""
    records = {
        "t": [i * (data + batch) for i in range(steps)],
        "data_time": [data] * steps,
        "batch_time": [batch] * steps,
        "wall": [data + batch] * steps,
        "samples": [8] * steps,
        "phase": ["warmup"] * 5 + ["steady"] * (steps - 5),
        "epoch": [0] * steps,
    }
    return {
        "rank": rank,
        "world_size": 2,
        "host": "node",
        "pid": 100 + rank,
        "result": RunResult(records=records).to_dict(),
        "sync_time": [sync] * steps,
        "sync_note": None,
        "error": None,
        "failed_at": 0.0,
    }


def test_job_figures_come_from_the_slowest_rank_and_throughput_is_summed() -> None:
    job = job_result([payload(1, 0.004, 0.006, 0.001), payload(0, 0.001, 0.010, 0.007)])
    assert [e.rank for e in job.ranks] == [0, 1]
    assert job.ranks[1].work_time == pytest.approx(0.009)
    assert job.ranks[0].work_time == pytest.approx(0.004)
    # the slowest rank's wait; the rest of the job's step, which lasts as long as the longest
    # rank's (11 ms), so the job's times add up to its throughput
    assert (job.data_time, job.batch_time) == pytest.approx((0.004, 0.007))
    assert job.samples_per_s == pytest.approx(16 / (job.data_time + job.batch_time))
    assert job.samples_per_s == pytest.approx(2 * 8 / 0.011)
    assert job.samples == 2 * 8 * 20 and job.steps == 20


@pytest.mark.parametrize(
    ("slow", "cause", "knob"),
    [
        ((0.020, 0.005, 0.001), "data loading is slower", "workers"),
        ((0.001, 0.030, 0.001), "compute is slower", None),
    ],
)
def test_straggler_names_the_rank_and_its_cause(slow, cause, knob) -> None:
    job = job_result([payload(0, 0.001, 0.030, 0.025), payload(1, *slow)])
    (finding,) = [f for f in rank_findings(job) if f.kind == "straggler"]
    assert finding.evidence.startswith("Rank 1 needs") and cause in finding.advice
    assert finding.knob == knob


def test_time_in_gradient_sync_is_flagged_when_it_is_a_large_share() -> None:
    job = job_result([payload(0, 0.001, 0.010, 0.004), payload(1, 0.001, 0.010, 0.004)])
    (finding,) = rank_findings(job)
    assert finding.kind == "overhead_bound" and finding.severity == "warn"
    assert "Gradient synchronisation takes 4.0 ms of each 11.0 ms step (36%)" in finding.evidence
    assert (finding.knob, finding.value) == ("batch_size", 32)
    assert (
        rank_findings(
            job_result([payload(0, 0.001, 0.010, 0.001), payload(1, 0.001, 0.010, 0.001)])
        )
        == []
    )
