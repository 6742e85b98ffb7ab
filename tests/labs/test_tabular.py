"""Tests for speedlab.labs.tabular: generated rows, their DataModule and the MLP."""

from __future__ import annotations

import pickle
import statistics

import torch

from speedlab.labs.tabular import MLP, TabularDataModule, make_tabular, tabular_lab
from speedlab.run.loaders import shutdown_loader


def test_rows_are_deterministic_from_the_seed() -> None:
    x, y = make_tabular(n=1000, features=12, classes=3, seed=5)
    assert (x.shape, x.dtype, y.shape, y.dtype) == ((1000, 12), torch.float32, (1000,), torch.int64)
    again_x, again_y = make_tabular(n=1000, features=12, classes=3, seed=5)
    assert torch.equal(x, again_x) and torch.equal(y, again_y)
    assert not torch.equal(make_tabular(n=1000, features=12, classes=3, seed=6)[0], x)


def test_every_class_is_well_represented() -> None:
    _, y = make_tabular()
    counts = torch.bincount(y, minlength=4)
    assert counts.sum() == 20_000
    assert counts.min() > 0.1 * 20_000 and counts.max() < 0.4 * 20_000


def test_datamodule_splits_and_batches() -> None:
    data = TabularDataModule(batch_size=16, n=500, features=6, classes=3)
    data.setup("fit")
    assert (len(data.train_set), len(data.val_set)) == (450, 50)
    x, y = next(iter(data.train_dataloader()))
    assert (x.shape, y.shape) == ((16, 6), (16,))
    model, lab_data = tabular_lab(features=6, classes=3, hidden=8)
    assert isinstance(model, MLP) and model.hparams["features"] == 6
    assert lab_data.features == 6 and model(x).shape == (16, 3)


def test_two_worker_processes_see_every_row() -> None:
    data = TabularDataModule(batch_size=32, num_workers=2, persistent_workers=True, n=400)
    data.setup("fit")
    loader = data.val_dataloader()
    assert (loader.num_workers, loader.persistent_workers) == (2, True)
    assert pickle.loads(pickle.dumps(data.val_set)).tensors[1].tolist() == (
        data.val_set.tensors[1].tolist()
    )
    rows = torch.cat([x for x, _ in loader])
    assert torch.equal(rows, data.val_set.tensors[0])
    rows = torch.cat([x for x, _ in loader])  # a second epoch reuses the workers
    assert torch.equal(rows, data.val_set.tensors[0])
    shutdown_loader(loader)  # a reference cycle would keep persistent workers until a gc pass


def test_default_lab_learns(train) -> None:
    torch.manual_seed(0)
    model, data = tabular_lab()
    losses, metrics = train(model, data, steps=150)
    assert len(losses) == 150
    assert statistics.median(losses[-10:]) < 0.7 * statistics.median(losses[:10])
    assert metrics["val_acc"] > 0.6  # the largest class is about 0.3
