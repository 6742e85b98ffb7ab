"""Tabular lab: generated rows held in memory and a small MLP.

Each step is tiny, so the time goes to per-step overhead (indexing single rows, collating,
the Python around the step) rather than to the maths: the lesson is about batch size and
overhead, not about workers.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset
from typing_extensions import override

from speedlab.labs._base import Classifier, LabDataModule


def make_tabular(
    n: int = 20_000, features: int = 32, classes: int = 4, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``x`` (n, features) of standard normal values and labels ``y`` (n,), from a seed.

    The label is the arg-max of a random one-hidden-layer tanh network applied to the row: a
    nonlinear rule that an MLP can learn.
    """
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=generator)
    hidden = torch.randn(features, 16, generator=generator) * (2 / features**0.5)
    out = torch.randn(16, classes, generator=generator)
    return x, (torch.tanh(x @ hidden) @ out).argmax(dim=1)


class TabularDataModule(LabDataModule):
    """``make_tabular`` rows in a ``TensorDataset``: the first 90% train, the rest val.

    Args:
        batch_size, num_workers, pin_memory, persistent_workers: passed to the DataLoaders.
        n, features, classes, seed: passed to ``make_tabular``.
    """

    def __init__(
        self,
        *,
        batch_size: int = 64,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        n: int = 20_000,
        features: int = 32,
        classes: int = 4,
        seed: int = 0,
    ) -> None:
        super().__init__(batch_size, num_workers, pin_memory, persistent_workers)
        self.save_hyperparameters()
        self.n, self.features, self.classes, self.seed = n, features, classes, seed

    @override
    def setup(self, stage: str) -> None:
        x, y = make_tabular(self.n, self.features, self.classes, self.seed)
        cut = self.n - self.n // 10
        self.train_set = TensorDataset(x[:cut], y[:cut])
        self.val_set = TensorDataset(x[cut:], y[cut:])


class MLP(Classifier):
    """Two hidden ReLU layers for the tabular rows.

    Args:
        features: inputs per row.
        classes: number of classes.
        hidden: width of the hidden layers.
        lr: Adam learning rate.
    """

    def __init__(
        self, features: int = 32, classes: int = 4, hidden: int = 64, lr: float = 3e-3
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            nn.Linear(features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, classes),
        )


def tabular_lab(*, lr: float = 3e-3, hidden: int = 64, **data_kw) -> tuple[MLP, TabularDataModule]:
    """An ``MLP`` and a ``TabularDataModule(**data_kw)`` that fit together.

    The loss falls clearly within 100-200 steps at the defaults.
    """
    data = TabularDataModule(**data_kw)
    return MLP(features=data.features, classes=data.classes, hidden=hidden, lr=lr), data
