"""speedlab.run.precision: an op that autocast refuses, explained in one line by the sweep that
goes on with its later runs. (What ``amp`` resolves to is checked with the Trainers that use it,
in test_intercept.)

CPU autocast does not refuse binary cross entropy, and the CUDA path needs a GPU: the sweep test
raises torch's own message, as CUDA autocast words it, from a real training step on the CPU.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from torch.multiprocessing.spawn import ProcessRaisedException
from torch.utils.data import DataLoader

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER, KnownCostDataset, KnownCostModel
from speedlab.run.precision import AUTOCAST_REFUSES_BCE, BCE_UNDER_AUTOCAST, autocast_refusal
from speedlab.run.sweep import describe_error

TORCH_REFUSAL = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using "
    "torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)
"""The error CUDA autocast raises for binary cross entropy, as torch 2.13 words it (ATen's
autocast_mode.cpp, compiled into libtorch_cpu)."""


def test_torch_still_words_its_refusal_so() -> None:
    library = next(Path(torch.__file__).parent.glob("lib/libtorch_cpu.*"), None)
    if library is None:
        pytest.skip("torch's CPU library is not where this torch keeps it")
    with library.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as text:
        assert text.find(TORCH_REFUSAL.encode()) != -1
    assert TORCH_REFUSAL.startswith(AUTOCAST_REFUSES_BCE)


def test_cpu_autocast_runs_binary_cross_entropy_in_float32() -> None:
    """Why the sweep below raises CUDA's refusal itself: on the CPU, nothing refuses."""
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.binary_cross_entropy(torch.sigmoid(torch.randn(4)), torch.rand(4))
    assert loss.dtype == torch.float32


def test_the_refusal_is_one_line_naming_the_op_and_its_safe_replacement() -> None:
    line = describe_error(RuntimeError(TORCH_REFUSAL))
    assert line == BCE_UNDER_AUTOCAST and "\n" not in line
    for named in ("F.binary_cross_entropy /", "nn.BCELoss", "no sigmoid before the loss"):
        assert named in line
    assert "F.binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss" in line
    assert autocast_refusal("RuntimeError: CUDA error: out of memory") is None


def test_a_ranks_refusal_is_explained_too() -> None:
    """A rank's error ends with its traceback, whose last line alone ('safe to autocast.')
    would say nothing; a rank's own account (``rank 0 failed: ...``) is explained too."""
    traceback = f"Traceback (most recent call last):\n  ...\nRuntimeError: {TORCH_REFUSAL}\n"
    failed = ProcessRaisedException(f"\n\n-- Process 1 terminated:\n{traceback}", 1, 4242)
    assert describe_error(failed) == BCE_UNDER_AUTOCAST
    assert autocast_refusal(f"rank 0 failed: RuntimeError: {TORCH_REFUSAL}") == BCE_UNDER_AUTOCAST


class SigmoidThenBce(KnownCostModel):
    """Binary cross entropy on a sigmoid's output, refused where autocast is on (as CUDA's is:
    CPU autocast would run it)."""

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int):
        x, y = batch
        probability = torch.sigmoid(self.net(x)[:, 1])
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError(TORCH_REFUSAL)
        return F.binary_cross_entropy(probability, y.float())


def test_a_refused_op_is_one_line_and_the_sweep_goes_on(capsys: pytest.CaptureFixture) -> None:
    def train() -> None:
        trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(SigmoidThenBce(step_s=0.001), DataLoader(KnownCostDataset(200), batch_size=8))

    precisions = ["32-true", "bf16-mixed", "32-true"]
    # No warm-up, so no FLOPs counted, and no peak measured: a CPU's bf16 peak takes seconds.
    sweep = profile_train(train, precision=precisions, steps=5, warmup=0, live=False, store=False)
    before, refused, after = sweep.runs
    assert refused.error == BCE_UNDER_AUTOCAST and refused.steps == 0
    assert before.ok and after.ok and after.steps == 5
    err = capsys.readouterr().err
    assert err.count(BCE_UNDER_AUTOCAST) == 1
    assert "Traceback" not in err and AUTOCAST_REFUSES_BCE not in err
