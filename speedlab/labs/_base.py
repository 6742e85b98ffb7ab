"""What the labs share: a classifier LightningModule and a DataModule that builds the loaders.

Every lab trains the same way (cross-entropy, ``train_loss`` logged each step) and loads data
the same way (the speed knobs are DataLoader arguments), so both live here once.
"""

from __future__ import annotations

from types import MappingProxyType

import lightning.pytorch as pl
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset
from typing_extensions import override

QUIET_TRAINER = MappingProxyType(
    {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }
)
"""Trainer arguments for a run that only trains: no logger, checkpoints, progress bar or model
summary (``pl.Trainer(max_steps=100, **QUIET_TRAINER)``)."""


class Classifier(pl.LightningModule):
    """Cross-entropy classifier around ``self.net``, which subclasses build.

    Logs ``train_loss`` every step and ``val_loss``/``val_acc`` per validation epoch. The steps
    never copy a value to the host (no ``.item()``), so the labs profile fairly on a GPU.
    Subclasses call ``save_hyperparameters()`` with an ``lr`` argument; the optimizer is Adam.
    """

    net: nn.Module

    @override
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    @override
    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    @override
    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(dim=1) == y).float().mean(), prog_bar=True)

    @override
    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class LabDataModule(pl.LightningDataModule):
    """Builds the train (shuffled) and val loaders from ``train_set``/``val_set``.

    Subclasses fill ``train_set`` and ``val_set`` in ``setup``. The loader settings are plain
    attributes so that tools (and Lightning's batch-size finder) can read and change them.
    ``persistent_workers`` is ignored while ``num_workers`` is 0, where DataLoader refuses it.
    """

    def __init__(
        self, batch_size: int, num_workers: int, pin_memory: bool, persistent_workers: bool
    ) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None

    @override
    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    @override
    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def _loader(self, dataset: Dataset | None, *, shuffle: bool) -> DataLoader:
        if dataset is None:
            raise RuntimeError(f"{type(self).__name__}.setup() must run before its loaders.")
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.persistent_workers and self.num_workers > 0,
        )
