"""Fixtures for the labs tests: a private dataset cache and a short real training run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache folder for the session, so the default image dataset is drawn only once."""
    return tmp_path_factory.mktemp("speedlab-cache")


@pytest.fixture(autouse=True)
def cache(shared_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point SPEEDLAB_CACHE at the session's temporary folder: nothing goes to the home folder."""
    monkeypatch.setenv("SPEEDLAB_CACHE", str(shared_cache))
    return shared_cache


class LossRecorder(pl.Callback):
    """Keeps the training loss of every step."""

    def __init__(self) -> None:
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


@pytest.fixture
def quiet(tmp_path: Path) -> dict:
    """Trainer arguments for a short silent CPU run that writes nothing."""
    return {
        "accelerator": "cpu",
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
    }


@pytest.fixture
def train(quiet: dict) -> Callable[..., tuple[list[float], dict[str, float]]]:
    """``train(model, data, steps)``: fit for ``steps`` steps, then validate once.

    Returns the per-step training losses and the validation metrics. Seed torch before
    building the model for a repeatable run.
    """

    def run(model: pl.LightningModule, data: pl.LightningDataModule, steps: int):
        recorder = LossRecorder()
        # One thread: on a shared 2-core box, two threads that wait on each other while other
        # processes hold the cores run several times slower than one.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            trainer = pl.Trainer(
                max_steps=steps, limit_val_batches=0, callbacks=[recorder], **quiet
            )
            trainer.fit(model, data)
            [metrics] = pl.Trainer(**quiet).validate(model, data, verbose=False)
        finally:
            torch.set_num_threads(threads)
        return recorder.losses, metrics

    return run
