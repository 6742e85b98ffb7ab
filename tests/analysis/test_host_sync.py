"""speedlab.analysis.host_sync: syncs the linter reads in the source, and syncs measured per
source line on a GPU."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.linter import lint
from speedlab.labs import KnownCostModel, known_cost_loader
from speedlab.results.run import RunResult
from tests.doctor_runs import QUIET, kinds, profile, the


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


def test_a_sync_read_in_the_source_is_named_for_the_device_the_run_trained_on() -> None:
    """On a CPU run there is no GPU to wait for: the summary says what the line would do on
    one; on a TPU it names the TPU."""
    lint_findings = lint(SyncingModel)
    on_cpu = the(diagnose(RunResult(device="cpu"), lint_findings=lint_findings), "host_sync")
    assert "would make the CPU wait for a GPU every step (item)" in on_cpu.summary
    assert "makes the CPU wait for the GPU" not in on_cpu.summary
    on_gpu = the(diagnose(RunResult(device="cuda"), lint_findings=lint_findings), "host_sync")
    assert "makes the CPU wait for the GPU every step (item)" in on_gpu.summary
    on_tpu = the(diagnose(RunResult(device="xla"), lint_findings=lint_findings), "host_sync")
    assert "makes the CPU wait for the TPU every step" in on_tpu.summary
    # self.log is no cure where the progress bar converts the value every step.
    (item,) = [f for f in lint_findings if f.rule == "item"]
    assert "prog_bar=True" in item.fix


def test_the_measured_sync_advice_says_the_progress_bar_converts_logged_values() -> None:
    run = RunResult(
        device="cuda",
        host_syncs={"steps": 3, "lines": [{"file": "/me/t.py", "line": 4, "count": 3}]},
    )
    found = the(diagnose(run), "host_sync")
    assert (
        "self.log(loss) rather than loss.item(); with prog_bar=True Lightning converts it to a "
        "number after every step, whatever the bar's refresh rate" in found.advice
    )
