"""speedlab.measure.compat (named apart from tests/run/test_compat.py): which of a real
trainer's per-step calls are Lightning's own."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.compat import batch_untouched, feeds_iterator, quiet_fetch


class Facts(pl.Callback):
    """What the compat checks say of the trainer as its training starts."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.untouched = batch_untouched(trainer)
        self.quiet = (
            quiet_fetch(trainer, "_on_before_fetch"),
            quiet_fetch(trainer, "_on_after_fetch"),
        )
        self.fed = feeds_iterator(trainer.fit_loop._data_fetcher)


class Moved(KnownCostModel):
    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


class Data(pl.LightningDataModule):
    def train_dataloader(self):
        return known_cost_loader(n=64, batch_size=8)


class Augmented(Data):
    def on_before_batch_transfer(self, batch, dataloader_idx):
        return batch


class FedTheIterator(KnownCostModel):
    def training_step(self, dataloader_iter):
        batch, batch_idx, _ = next(dataloader_iter)
        return super().training_step(batch, batch_idx)


def facts(model: pl.LightningModule, data: Any = None, **trainer: Any) -> Facts:
    """Fit ``model`` two steps, on ``data`` (a datamodule) or a loader, and say what was seen."""
    seen = Facts()
    options = {**QUIET_TRAINER, "accelerator": "cpu", "max_steps": 2, **trainer}
    source = (
        {"datamodule": data}
        if data is not None
        else {"train_dataloaders": known_cost_loader(n=64, batch_size=8)}
    )
    pl.Trainer(callbacks=[seen], **options).fit(model, **source)
    return seen


@pytest.mark.parametrize(
    ("model", "data", "trainer", "untouched"),
    [
        (KnownCostModel, None, {}, True),
        (KnownCostModel, None, {"precision": "bf16-mixed"}, True),  # autocast: inputs as given
        (KnownCostModel, None, {"precision": "bf16-true"}, False),  # inputs cast to bf16
        (Moved, None, {}, False),
        (KnownCostModel, Data, {}, True),
        (KnownCostModel, Augmented, {}, False),
    ],
)
def test_a_batch_is_untouched_only_where_every_call_between_is_lightnings_own(
    model: type, data: type | None, trainer: dict, untouched: bool
) -> None:
    assert facts(model(step_s=0.0), data() if data else None, **trainer).untouched is untouched


def test_the_fetches_edges_are_quiet_only_under_the_default_profiler() -> None:
    assert facts(KnownCostModel(step_s=0.0)).quiet == (True, True)
    assert facts(KnownCostModel(step_s=0.0), profiler="simple").quiet == (False, False)


def test_a_step_taking_the_loaders_iterator_is_told_from_one_taking_batches() -> None:
    assert facts(FedTheIterator(step_s=0.0)).fed
    assert not facts(KnownCostModel(step_s=0.0)).fed
