"""speedlab on a real XLA device (XLA's CPU runtime): the device's timeline against a truth
drained at both edges of the steady window, compilation kept apart, a cell that compiles every
step diagnosed, the knobs that cannot act refused in one line (by the magic too), and
DataLoader workers feeding the device."""

from __future__ import annotations

import re
from collections.abc import Callable

import lightning.pytorch as pl
import pytest
import torch
from torch.nn import functional as F

import speedlab
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.devices import device_for
from speedlab.measure.pipeline import PIPELINE_KEYS
from speedlab.notebook.controls import WHOLE, hardware_limits
from tests.simulated_device import SynchronisedTruth

xm = pytest.importorskip("torch_xla.core.xla_model", reason="needs torch_xla: `make test-xla`")

FEATURES = 256
STEPS = 60


class Layers(KnownCostModel):
    """``layers`` square matmuls a step: the device's work, set by their number."""

    def __init__(self, layers: int, recompile: bool = False) -> None:
        super().__init__(step_s=0.0, features=FEATURES)
        self.layers, self.recompile = layers, recompile
        self.w = torch.nn.Parameter(torch.randn(FEATURES, FEATURES) / FEATURES**0.5)

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.recompile:  # a Python value sets a shape: a new graph every step
            x = x * torch.arange(batch_idx + 1, device=x.device).sum()
        for _ in range(self.layers):
            x = torch.tanh(x @ self.w)
        return F.cross_entropy(self.net(x), y)


def cell(model: Layers, *callbacks: pl.Callback, sleep_s: float = 0.0) -> Callable[[], None]:
    def train() -> None:
        trainer = pl.Trainer(
            accelerator="tpu",
            devices=1,
            max_steps=STEPS,
            callbacks=list(callbacks),
            **QUIET_TRAINER,
        )
        data = known_cost_loader(
            n=64 * (STEPS + 5), batch_size=64, features=FEATURES, sleep_s=sleep_s
        )
        trainer.fit(model, data)

    return train


def profile(train: Callable[[], None], **options):
    return speedlab.profile_train(train, steps=STEPS, live=False, store=False, **options)


@pytest.mark.parametrize(
    ("layers", "sleep_s", "bound"), [(40, 0.0, "device"), (2, 0.0008, "loader")]
)
def test_samples_per_s_follow_the_device_and_the_split_names_what_limits(
    layers: int, sleep_s: float, bound: str
) -> None:
    truth = SynchronisedTruth(xm.wait_device_ops, first=5)
    (run,) = profile(cell(Layers(layers), truth, sleep_s=sleep_s)).runs
    assert run.device == "xla"
    assert run.samples_per_s == pytest.approx(truth.samples_per_s, rel=0.05)
    step = run.data_time + run.batch_time
    if bound == "device":  # the loader's few ms hide behind the device's work
        assert run.data_time < 0.2 * step
    else:  # 64 samples x 0.8 ms of storage wait a batch, against two small matmuls
        assert run.data_time > 0.5 * step
        assert run.data_time <= run.host_data_time + 1e-9
    assert not [f for f in run.diagnosis if f.kind == "recompiling"]


def test_compilation_is_its_own_phase_never_inside_batch_time() -> None:
    (run,) = profile(cell(Layers(10))).runs
    r = run.records
    assert r["compiles"][0] >= 1 and r["compile_time"][0] > 0
    assert run.phases["compile"] >= r["compile_time"][0]
    # The first step's batch_time is its run, not its compilation (0.5 s or more here).
    assert r["batch_time"][0] < r["compile_time"][0]
    steady = [i for i, phase in enumerate(r["phase"]) if phase == "steady"]
    assert not any(r["compiles"][i] for i in steady)
    assert run.flops.get("per_step") is None  # counting would trace (and compile) another graph


def test_a_cell_that_compiles_every_step_is_diagnosed_with_the_cause_and_the_fix() -> None:
    (run,) = profile(cell(Layers(2, recompile=True))).runs
    steady = [i for i, phase in enumerate(run.records["phase"]) if phase == "steady"]
    assert all(run.records["compiles"][i] >= 1 for i in steady)
    (finding,) = [f for f in run.diagnosis if f.kind == "recompiling"]
    assert f"in {len(steady)} of the {len(steady)} steady steps" in finding.evidence
    assert "a Python value that changes each step" in finding.evidence
    assert "torch.tensor(x, device=self.device)" in finding.advice
    assert finding.severity == "critical"


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"compile": "default"}, "--compile default: does not apply on the "),
        ({"pin_memory": True}, "--pin-memory on: does not apply on the "),
        ({"precision": "bf16-mixed"}, "--precision bf16-mixed: not available on the "),
    ],
)
def test_knobs_that_cannot_act_on_xla_are_refused_in_one_line(option: dict, said: str) -> None:
    sweep = profile(cell(Layers(2)), **option)
    (run,) = sweep.runs
    assert run.error is not None and run.error.startswith(f"KnobRefused: {said}"), run.error
    assert "\n" not in run.error and not run.steps


def test_amp_is_bf16_true_and_matmul_is_inert_on_xla() -> None:
    device = device_for("xla")
    assert device.amp()[0] == "bf16-true"
    assert device.matmul("high")[1] is False
    assert device.is_available()


TPU_CELL = """
trainer = pl.Trainer(accelerator="tpu", devices=1, max_steps=60, **QUIET_TRAINER)
trainer.fit(Layers(2), known_cost_loader(n=64 * 65, batch_size=64, features=FEATURES))
"""


def test_the_magic_prints_the_table_and_refuses_compile_in_one_line(
    shell, capsys: pytest.CaptureFixture
) -> None:
    shell.user_ns |= {
        "pl": pl,
        "Layers": Layers,
        "known_cost_loader": known_cost_loader,
        "QUIET_TRAINER": QUIET_TRAINER,
        "FEATURES": FEATURES,
    }
    assert (
        shell.run_cell_magic("profile_train", "--compile off,default --no-live", TPU_CELL) is None
    )
    trained, refused = speedlab.last.runs
    assert trained.ok and trained.device == "xla" and trained.steps == STEPS
    said = f"--compile default: does not apply on the {device_for('xla').name}: "
    assert refused.error.startswith(f"KnobRefused: {said}") and not refused.steps
    captured = capsys.readouterr()
    table = captured.out.splitlines()
    assert "samples/s" in table[0]
    (baseline,) = [row for row in table if row.startswith("baseline")]
    assert f"{trained.samples_per_s:.1f}" in baseline, baseline
    err = captured.err.strip()
    assert re.fullmatch(re.escape(said) + r"[^\n]*", err), err  # one line, no traceback


def test_dataloader_workers_feed_the_xla_device() -> None:
    alone, workers = profile(cell(Layers(2)), workers=[0, 2]).runs
    for run in (alone, workers):
        assert run.ok and run.device == "xla" and run.steps == STEPS, run.error
    assert (alone.loader_workers(), workers.loader_workers()) == (0, 2)
    assert "pipeline" not in alone.records  # the main process loads: nothing to stamp
    stamps = workers.records["pipeline"]
    assert set(stamps) == set(PIPELINE_KEYS)
    assert sorted(set(stamps["worker"])) == [0, 1]
    assert len(stamps["worker"]) >= STEPS
    made = zip(stamps["start"], stamps["end"], stamps["taken"])
    assert all(start <= end <= taken for start, end, taken in made)


def test_the_panel_disables_compile_and_pin_memory_on_xla() -> None:
    limits = hardware_limits()  # the device a run here trains on: XLA's
    for knob in ("compile", "pin_memory"):
        assert limits[knob][WHOLE].startswith(f"does not apply on the {device_for('xla').name}: ")
    assert {"16-mixed", "bf16-mixed"} <= set(limits["precision"])
