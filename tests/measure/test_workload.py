"""speedlab.measure.workload: the samples in a batch, read from its shape or from the loader's
own batching."""

from __future__ import annotations

import dataclasses
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    Sampler,
    TensorDataset,
    default_collate,
)

from speedlab.labs import KnownCostModel
from speedlab.measure.probe import SpeedProbe
from speedlab.measure.workload import batch_size_of, full_batch, samples_of


@dataclasses.dataclass
class Pair:
    x: torch.Tensor
    y: torch.Tensor


@pytest.mark.parametrize(
    ("batch", "size"),
    [
        (torch.zeros(7, 3), 7),
        ((torch.zeros(5, 2), torch.zeros(5)), 5),
        ({"image": torch.zeros(3, 1), "label": torch.zeros(3)}, 3),
        ([[torch.zeros(4)], 1], 4),
        (torch.tensor(1.0), 1),
        ([], 0),
        ((["a", "b", "c"], torch.zeros(3, 2)), 3),  # the first tensor, past a list of names
        ((None, {"x": torch.zeros(6)}), 6),
        (Pair(torch.zeros(2, 2), torch.zeros(2)), 2),
        ([torch.zeros(0, 3), torch.zeros(5)], 5),  # an empty first tensor: the next one's
        ((torch.tensor(2.0), torch.zeros(4)), 1),  # a scalar first: one sample, as alone
    ],
)
def test_batch_size_of(batch: object, size: int) -> None:
    assert batch_size_of(batch) == size


def test_samples_of_several_loaders_add_up() -> None:
    pair = (torch.zeros(4, 3), torch.zeros(4))
    other = {"x": torch.zeros(2, 3)}
    loaders = {"a": "loader a", "b": "loader b"}
    assert samples_of({"a": pair, "b": other}, loaders) == 6
    assert samples_of([pair, other], ["loader a", "loader b"]) == 6
    assert samples_of({"a": pair, "b": None}, loaders) == 4  # mode "max_size": b is done
    assert samples_of(pair, "one loader") == 4


class Rows(pl.Callback):
    """The truth: the rows of each batch a step trains, and the probe's full batch, if any."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.full: Any = "unread"

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.full = full_batch(trainer, trainer.fit_loop._data_fetcher)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, i: int) -> None:
        self.rows.append(len(batch[1]))


def fit_counting(model: pl.LightningModule, loader: Any, **fit) -> tuple[Rows, SpeedProbe]:
    """Fit ``model`` on ``loader`` (its own where None) under the truth and a probe."""
    truth, probe = Rows(), SpeedProbe(warmup=0, sample_system=False)
    pl.Trainer(
        callbacks=[truth, probe],
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **fit,
    ).fit(model, loader)
    return truth, probe


class Stream(IterableDataset):
    """20 samples a worker, with no length: each worker ends on a short batch of its own."""

    def __iter__(self):
        return iter(list(zip(torch.randn(20, 8), torch.randint(0, 2, (20,)))))


class Halved(KnownCostModel):
    """The module trains half of each batch: the batch changes between fetch and training."""

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        x, y = batch
        return x[: len(x) // 2], y[: len(y) // 2]


def pairs(n: int) -> TensorDataset:
    return TensorDataset(torch.randn(n, 8), torch.randint(0, 2, (n,)))


class Unsized(Sampler):
    """A map-style dataset's 20 indices, in order, with no length."""

    def __iter__(self):
        return iter(range(20))


def twice(samples: list) -> Any:
    """A collate of the user's own: two rows a sample."""
    x, y = default_collate(samples)
    return torch.cat([x, x]), torch.cat([y, y])


@pytest.mark.parametrize(
    ("loader", "fit", "full", "rows"),
    [
        (DataLoader(pairs(20), batch_size=8), {}, 8, [8, 8, 4] * 2),
        (DataLoader(pairs(20), batch_size=8, drop_last=True), {}, 8, [8, 8] * 2),
        (DataLoader(pairs(20), batch_size=8, shuffle=True), {}, 8, [8, 8, 4] * 2),
        (
            DataLoader(pairs(20), batch_sampler=BatchSampler(Unsized(), 8, False)),
            {},
            8,
            [8, 8, 4] * 2,
        ),
        (DataLoader(pairs(24), batch_size=8), {}, 8, [8, 8, 8] * 2),
        (DataLoader(pairs(20), batch_size=8), {"limit_train_batches": 2}, 8, [8, 8] * 2),
        (DataLoader(pairs(20), batch_size=8), {"model": Halved}, None, [4, 4, 2] * 2),
        (DataLoader(pairs(20), batch_size=8, collate_fn=twice), {}, None, [16, 16, 8] * 2),
        (DataLoader(Stream(), batch_size=8), {}, None, [8, 8, 4] * 2),
        (DataLoader(Stream(), batch_size=8, num_workers=2), {}, None, [8, 8, 8, 8, 4, 4] * 2),
    ],
    ids=[
        "short-last",
        "drop-last",
        "shuffled",
        "unsized-sampler",
        "even",
        "limited",
        "changed-on-transfer",
        "own-collate",
        "stream",
        "stream-workers",
    ],
)
def test_each_step_counts_the_rows_it_trains(
    loader: DataLoader, fit: dict[str, Any], full: int | None, rows: list[int]
) -> None:
    """Where torch's own batching fixes a batch's samples, only the loader's last batch is sized
    as it comes (the fetcher is done as it hands it over); elsewhere every batch is sized. Either
    way each step's samples are the rows it trained, the short last batches included."""
    model = fit.pop("model", KnownCostModel)(step_s=0.0)
    truth, probe = fit_counting(model, loader, max_epochs=2, **fit)
    assert truth.full == full
    assert sorted(truth.rows) == sorted(rows)  # the workers' batches come in either order
    assert probe.result().records["samples"] == truth.rows


class Reloaded(KnownCostModel):
    """Its own loader, made anew each epoch with batches half as large as the last epoch's."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(pairs(20), batch_size=8 >> self.trainer.current_epoch)


def test_a_loader_made_anew_each_epoch_is_counted_by_its_own_batches() -> None:
    """With ``reload_dataloaders_every_n_epochs`` Lightning makes a new loader and fetcher each
    epoch, after the probe read the first: each step still counts the rows it trained."""
    model = Reloaded(step_s=0.0)
    truth, probe = fit_counting(model, None, max_epochs=3, reload_dataloaders_every_n_epochs=1)
    assert truth.rows == [8, 8, 4] + [4] * 5 + [2] * 10
    assert probe.result().records["samples"] == truth.rows
