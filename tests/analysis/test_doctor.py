"""speedlab.analysis.doctor: every finding kind from real short runs, fair comparison, the next experiment.

Runs are short (tens of steps) on the known-cost workload and the labs. Workloads are chosen so
the verdict holds with a margin on a shared 2-core machine: costs are sleeps or busy-waits set
in advance, and image-lab throttles make reads dominate.
"""

from __future__ import annotations

import json
import multiprocessing
import sys
from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import pytest
from torch.nn import functional as F
from torch.utils.data import DataLoader

import speedlab
from speedlab.analysis.doctor import (
    CONTENDED_CORES,
    KINDS,
    Finding,
    diagnose,
    diagnose_sweep,
    next_experiment,
    waiting_share,
)
from speedlab.analysis.linter import lint
from speedlab.labs import (
    QUIET_TRAINER,
    KnownCostDataset,
    KnownCostModel,
    ThrottledOpener,
    busy_wait,
    image_lab,
    known_cost_loader,
    tabular_lab,
)
from speedlab.measure.probe import SpeedProbe
from speedlab.results.compare import other_processes_cores
from speedlab.results.run import RunResult, SweepResult, empty_records

QUIET = dict(accelerator="cpu", num_sanity_val_steps=0, **QUIET_TRAINER)
IMAGES = {"n": 400, "size": 32}


def profile(train: Callable[[], None], **options) -> SweepResult:
    return speedlab.profile_train(train, live=False, store=False, **options)


def kinds(findings: list[Finding]) -> list[str]:
    return [f.kind for f in findings]


def the(findings: list[Finding], kind: str) -> Finding:
    [found] = [f for f in findings if f.kind == kind]
    return found


class Validated(KnownCostModel):
    """KnownCostModel with a validation step."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


def require_quiet(*runs: RunResult) -> None:
    """Skip when other processes took the CPU during a run.

    The doctor then says its figures are uncertain: a loader starved of CPU looks idle, and
    tiny steps look long. Tests of such verdicts need a quiet machine.
    """
    others = max(other_processes_cores(run) for run in runs)
    if others >= CONTENDED_CORES:
        pytest.skip(f"other processes used {others:.1f} cores during the run")


def known_cost(
    *, step_s: float = 0.005, val: DataLoader | None = None, trainer: dict | None = None, **data
) -> Callable[[], None]:
    """A cell training KnownCostModel on ``known_cost_loader(**data)`` for one epoch."""

    def train() -> None:
        fit = pl.Trainer(**{"max_epochs": 1, **QUIET, **(trainer or {})})
        model = (Validated if val is not None else KnownCostModel)(step_s=step_s)
        fit.fit(model, known_cost_loader(**data), val)

    return train


def images(root: Path, **data) -> Callable[[], None]:
    def train() -> None:
        model, module = image_lab(root=root, **IMAGES, **data)
        pl.Trainer(max_epochs=20, limit_val_batches=0, **QUIET).fit(model, module)

    return train


@pytest.fixture(scope="module")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("images")


@pytest.fixture(scope="module")
def image_sweep(image_root: Path) -> SweepResult:
    """The image lab as written (workers=0), then with 4 workers on this small machine."""
    return profile(images(image_root), workers=[0, 4], steps=15)


@pytest.fixture(scope="module")
def throttled_sweep(image_root: Path) -> SweepResult:
    """The image lab on slow storage (10 ms per file): reads dominate every step."""
    slow = ThrottledOpener(bytes_per_s=4e6, latency_s=0.01)
    return profile(images(image_root, throttle=slow, batch_size=8), workers=[0, 2], steps=15)


@pytest.fixture(scope="module")
def batch_sweep() -> SweepResult:
    """Each step costs 20 ms whatever the batch: twice the batch is a real 2x in samples/s."""
    return profile(known_cost(step_s=0.02, n=2000, batch_size=8), batch_size=[8, 16], steps=15)


# -- data-bound: CPU or I/O ---------------------------------------------------------------------


def test_image_lab_without_throttle_is_cpu_bound_and_names_workers_and_preload(
    image_sweep: SweepResult,
) -> None:
    base = image_sweep.baseline
    require_quiet(base)
    assert base.data_share > 0.2
    found = the(diagnose(base), "cpu_bound")
    assert found.severity == "critical"
    assert "workers" in found.advice and "--preload ram" in found.advice
    assert f"{waiting_share(base):.0%} of the step" in found.evidence
    assert (found.knob, found.value) == ("preload", "ram")  # torch uses both cores already
    assert "io_bound" not in kinds(diagnose(base))


def test_throttled_image_lab_is_io_bound_with_or_without_workers(
    throttled_sweep: SweepResult,
) -> None:
    base, workers = throttled_sweep.runs
    require_quiet(base, workers)
    first = the(diagnose(base), "io_bound")
    assert first.severity == "critical"
    assert "workers=0" in first.evidence
    assert (first.knob, first.value) == ("workers", 2)
    then = the(diagnose(workers), "io_bound")
    assert "The 2 worker(s) used" in then.evidence
    assert (then.knob, then.value) == ("preload", "ram")
    assert "cpu_bound" not in kinds(diagnose(base)) + kinds(diagnose(workers))


def test_waits_in_bursts_count_by_their_total_not_the_median_step() -> None:
    """Workers that cannot keep up hand over batches in turns: 3 of 5 steps find one ready, 2
    wait 50 ms. The median step waits nothing, yet 2 * 50 / (2 * 50 + 5 * 20) = half the time
    goes to waiting."""
    records = empty_records()
    for i in range(40):
        data = 0.050 if i % 5 in (1, 3) else 0.0
        for key, value in (("t", float(i)), ("data_time", data), ("batch_time", 0.020)):
            records[key].append(value)
        records["wall"].append(data + 0.020)
        records["samples"].append(32)
        records["phase"].append("steady")
        records["epoch"].append(0)
    run = RunResult(knobs={"workers": 2}, records=records)
    assert run.data_share == 0.0
    assert waiting_share(run) == pytest.approx(0.5)
    (finding,) = [f for f in diagnose(run) if f.kind in ("cpu_bound", "io_bound")]
    assert finding.severity == "critical"
    assert "20.0 ms for data on average, in bursts" in finding.evidence
    assert "model_bound" not in kinds(diagnose(run))


def test_next_experiment_keeps_the_best_knobs_and_sweeps_the_top_finding(
    throttled_sweep: SweepResult,
) -> None:
    require_quiet(*throttled_sweep.runs)
    line = next_experiment(throttled_sweep)
    assert line.startswith("%%profile_train --workers 2 --preload off,ram --steps 15")


# -- per-step overhead, oversubscription, model-bound -----------------------------------------


def test_mlp_lab_is_overhead_bound_and_asks_for_a_larger_batch() -> None:
    def train() -> None:
        model, data = tabular_lab()
        pl.Trainer(max_epochs=1, limit_val_batches=0, **QUIET).fit(model, data)

    sweep = profile(train, steps=40)
    require_quiet(sweep.baseline)
    found = the(diagnose(sweep.baseline), "overhead_bound")
    assert (found.knob, found.value) == ("batch_size", 256)
    assert "64 samples" in found.evidence and "larger batch" in found.advice
    assert "--batch-size 64,256 --steps 40" in next_experiment(sweep)


def test_too_many_workers_on_two_cores_is_oversubscribed(image_sweep: SweepResult) -> None:
    many = image_sweep.runs[1]
    require_quiet(many)
    found = the(diagnose(many), "oversubscribed")
    threads = many.system["torch_threads"]
    assert f"4 worker(s) + {threads} torch thread(s) (torch.get_num_threads())" in found.evidence
    assert found.knob == "workers" and found.value < 4
    assert "torch.set_num_threads" in found.advice


def test_a_model_that_is_all_compute_is_model_bound_and_says_what_this_cpu_cannot_do() -> None:
    sweep = profile(known_cost(step_s=0.02, n=2000), steps=15)
    found = the(diagnose(sweep.baseline), "model_bound")
    assert found.severity == "info"
    assert "--matmul changes nothing" in found.advice
    assert "bf16" in found.advice
    assert found.knob in ("compile", "precision")


# -- epoch start, validation, stragglers --------------------------------------------------------


def test_workers_restarting_every_epoch_show_as_epoch_start_and_persistence_removes_it() -> None:
    sweep = profile(
        known_cost(step_s=0.01, n=48, batch_size=8, trainer={"max_epochs": 100}),
        workers=2,
        persistent_workers=[False, True],
        steps=42,
    )
    restart, persistent = sweep.runs
    found = the(diagnose(restart), "epoch_start")
    assert "6 epoch(s) after the first" in found.evidence
    assert (found.knob, found.value) == ("persistent_workers", True)
    assert restart.phases["epoch_start"] > 2 * persistent.phases["epoch_start"]
    assert all(f.knob is None for f in diagnose(persistent) if f.kind == "epoch_start")


def test_slow_validation_is_validation_heavy() -> None:
    val = known_cost_loader(n=48, batch_size=8, sleep_s=0.003)
    train = known_cost(n=2000, val=val, trainer={"val_check_interval": 5})
    run = profile(train, steps=30).baseline
    found = the(diagnose(run), "validation_heavy")
    assert found.severity == "critical"
    assert f"Validation took {run.phases['validation']:.2f} s" in found.evidence
    assert found.knob == "trainer.limit_val_batches"


def test_one_slow_worker_is_a_straggler() -> None:
    train = known_cost(n=2000, batch_size=8, sleep_s=0.002, slow_worker=1, slow_factor=6)
    run = profile(train, workers=2, steps=24).baseline
    found = the(diagnose(run), "straggler")
    assert found.evidence.startswith("Worker 1 takes")
    assert (found.knob, found.value) == ("workers", 4)


# -- compile payback, host syncs, notebook traps ------------------------------------------------


class Forwarding(KnownCostModel):
    """KnownCostModel whose step goes through ``forward``, the part ``compile()`` compiles."""

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        busy_wait(self.step_s)
        return loss


def _probe_run(model: pl.LightningModule, compiled: bool) -> RunResult:
    probe = SpeedProbe(warmup=3, compiled=compiled)
    trainer = pl.Trainer(max_steps=20, callbacks=[probe], **QUIET)
    trainer.fit(model, known_cost_loader(n=2000, batch_size=8))
    return probe.result()


def test_compile_payback_reports_cost_and_break_even_or_never() -> None:
    # The forward is compiled in place and the probe told so: the engine's --compile path is
    # the runner's to test; here the doctor's arithmetic is.
    plain = _probe_run(Forwarding(step_s=0.02), compiled=False)
    model = Forwarding(step_s=0.02)
    model.compile(backend="eager")  # dynamo's real tracing, without a C++ build
    compiled = _probe_run(model, compiled=True)
    plain.knobs, compiled.knobs = {"compile": "off"}, {"compile": "on"}
    sweep = SweepResult([plain, compiled])
    found = the(diagnose_sweep(sweep), "compile_payback")
    assert found.evidence.startswith("Compiling cost ")
    assert "Break-even" in found.advice
    # A busy-wait dominates each step, so compiling the tiny forward saves nothing measurable.
    assert "never" in found.advice and found.value == "off"


class SyncingModel(KnownCostModel):
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.last = loss.item()
        return loss


def test_lint_findings_become_host_sync_findings_with_the_line() -> None:
    def train() -> None:
        pl.Trainer(max_epochs=1, **QUIET).fit(SyncingModel(step_s=0.002), known_cost_loader(n=2000))

    run = profile(train, steps=10).baseline
    findings = diagnose(run, lint_findings=lint(SyncingModel))
    found = the(findings, "host_sync")
    assert "self.last = loss.item()" in found.evidence and "Fix:" in found.advice
    assert found.severity == "info" and "costs little" in found.advice  # a CPU run
    assert "host_sync" not in kinds(diagnose(run))


GRAD_SCALER = "/venv/lib/python3.11/site-packages/torch/amp/grad_scaler.py"


@pytest.mark.parametrize(
    ("lines", "severity", "evidence"),
    [
        (
            [
                {"file": "/home/me/train.py", "line": 42, "count": 6},
                {"file": GRAD_SCALER, "line": 300, "count": 3},
            ],
            "warn",
            "3 synchronizing CUDA operation(s) a step, at /home/me/train.py:42 (2 a step), "
            "torch/amp/grad_scaler.py:300 (1 a step).",
        ),
        (
            [{"file": GRAD_SCALER, "line": 300, "count": 3}],
            "info",
            "1 synchronizing CUDA operation(s)",
        ),
    ],
)
def test_syncs_measured_on_a_gpu_are_host_sync_findings_with_their_places(
    lines: list, severity: str, evidence: str
) -> None:
    # What SpeedProbe records on a GPU (tests/test_syncs.py measures it there).
    run = RunResult(device="cuda", host_syncs={"steps": 3, "lines": lines})
    found = the(diagnose(run), "host_sync")
    assert found.evidence.startswith("Measured on the GPU over 3 warm-up step(s)")
    assert evidence in found.evidence and found.severity == severity
    assert ("In your code" in found.advice) == (severity == "warn")
    assert "host_sync" not in kinds(diagnose(RunResult(device="cuda")))


@pytest.fixture
def spawn_by_default():
    """Workers start with spawn, as on macOS and Windows."""
    saved = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    yield
    multiprocessing.set_start_method(saved, force=True)


def notebook_dataset() -> type:
    """A dataset class as a notebook cell defines it: it lives in ``__main__``."""
    return type("NotebookData", (KnownCostDataset,), {"__module__": "__main__"})


def test_a_notebook_dataset_under_spawn_is_a_notebook_trap(spawn_by_default) -> None:
    data = notebook_dataset()

    def train() -> None:
        loader = DataLoader(data(2000), batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.002), loader)

    run = profile(train, workers=1, steps=8).baseline
    assert run.ok
    found = the(diagnose(run), "notebook_trap")
    assert "NotebookData is defined in the notebook" in found.evidence
    assert ".py file" in found.advice


def test_workers_that_cannot_import_a_notebook_class_fail_and_the_doctor_explains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = notebook_dataset()
    # As in a notebook, the class is found in __main__ here, but not in a spawned worker.
    monkeypatch.setattr(sys.modules["__main__"], data.__name__, data, raising=False)

    def train() -> None:
        context = multiprocessing.get_context("spawn")
        loader = DataLoader(
            data(2000), batch_size=8, num_workers=1, multiprocessing_context=context
        )
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.002), loader)

    sweep = profile(train, steps=8)
    assert sweep.baseline.error
    found = the(diagnose_sweep(sweep), "notebook_trap")
    assert found.severity == "critical"
    assert "defined in the notebook" in found.advice and "/dev/shm" in found.advice
    assert (found.knob, found.value) == ("workers", 0)


# -- the sweep verdict --------------------------------------------------------------------------


def test_the_verdict_names_the_best_run_and_what_helped(batch_sweep: SweepResult) -> None:
    verdict = the(diagnose_sweep(batch_sweep), "verdict")
    assert verdict.evidence.startswith("Best: batch_size=16 at ")
    assert "faster" in verdict.evidence and "Helped: batch_size=16" in verdict.evidence
    assert verdict.advice == "Keep batch_size=16."


def test_findings_are_plain_data_in_the_doctors_order(image_sweep: SweepResult) -> None:
    findings = diagnose_sweep(image_sweep)
    assert findings[0].kind == "verdict"
    rest = findings[1:]
    order = [KINDS.index(f.kind) for f in rest]
    assert order == sorted(order)
    assert all(f.kind in KINDS for f in findings)
    json.dumps([f.to_dict() for f in findings])
    assert str(rest[0]).startswith(f"[{rest[0].severity}] {rest[0].kind}: ")
    with pytest.raises(ValueError):
        Finding("slow", "evidence", "advice")


def test_a_run_too_short_for_a_steady_state_gets_no_figure_findings() -> None:
    run = profile(known_cost(n=2000), steps=4).baseline
    assert diagnose(run) == []
