"""The compatibility matrix: a profiler must never change the batches a cell sees (issue 15).

Each cell below is real Lightning training with its seeds fixed. It runs once alone, then under
speedlab three ways: with no knobs, with ``workers=[0, 2]`` and with ``preload="ram"``. Every
profiled run must train exactly as the cell alone does (the same batches reach training_step,
the same optimizer steps, ``RunResult.samples`` equal to the samples the steps consumed), or
be refused before training in one line that names the option, the value and why. A stream
under another worker count is the exception: its batches follow the workers, so it only has to
run here; tests/run/test_streams.py compares its samples with the cell's at that worker count.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.utilities import CombinedLoader
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler, get_worker_info

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER
from speedlab.results.run import RunResult

STEPS = 6
MODES = {"no knobs": {}, "workers": {"workers": [0, 2]}, "preload": {"preload": "ram"}}


# -- data: every sample is known from its index -----------------------------------------------


def row(i: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.arange(i, i + 4, dtype=torch.float32), torch.tensor(float(i))


class Rows(Dataset):
    def __init__(self, n: int = 48) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return row(i)


class DictRows(Rows):
    def __getitem__(self, i: int) -> Any:
        x, y = row(i)
        return {"x": x, "y": y}


class NestedRows(Rows):
    def __getitem__(self, i: int) -> Any:
        x, y = row(i)
        return (x, torch.tensor(i)), y


class Noisy(Rows):
    """Each sample draws from torch's random state, as random augmentation does."""

    def __getitem__(self, i: int) -> Any:
        x, y = row(i)
        return x + 0 * torch.rand(4), y


class WholeBatches(Rows):
    """Item j is a whole batch of 4 rows (for ``batch_size=None``)."""

    def __getitem__(self, j: int) -> Any:
        xs, ys = zip(*(row(i) for i in range(4 * j, 4 * j + 4)))
        return torch.stack(xs), torch.stack(ys)


class Stream(IterableDataset):
    def __init__(self, n: int = 48) -> None:
        self.n = n

    def indices(self) -> range:
        return range(self.n)

    def __iter__(self):
        return (row(i) for i in self.indices())


class ShardedStream(Stream):
    def indices(self) -> range:
        info = get_worker_info()
        return range(self.n) if info is None else range(info.id, self.n, info.num_workers)


class EveryThirdBackwards(Sampler):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return len(range(self.n - 1, -1, -3))

    def __iter__(self):
        return iter(range(self.n - 1, -1, -3))


class GrowingBatches(Sampler):
    """Batches of 1, 2, 3, ... indices."""

    def __init__(self, n: int) -> None:
        self.batches = [list(range(k * (k - 1) // 2, k * (k + 1) // 2)) for k in range(1, 9)]
        self.batches = [b for b in self.batches if b[-1] < n]

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        return iter(self.batches)


class OwnLoader(DataLoader):
    """A user's DataLoader subclass: speedlab cannot rebuild it as it is."""


def to_dict(samples: list[Any]) -> dict[str, torch.Tensor]:
    xs, ys = zip(*samples)
    return {"x": torch.stack(xs), "y": torch.stack(ys)}


def seed_worker(worker_id: int) -> None:
    random.seed(worker_id)


# -- models: each records what its training_step receives ----------------------------------


def pair(batch: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = batch  # as users write it: a changed batch fails here
    return [(x, y)]


def dict_pair(batch: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(batch["x"], batch["y"])]


def nested_pair(batch: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    (x, _index), y = batch
    return [(x, y)]


def per_loader(batch: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    parts = batch.values() if isinstance(batch, Mapping) else batch
    return [pair(part)[0] for part in parts]


def plain(batch: Any) -> Any:
    """A batch as comparable Python values: dtype, shape and contents of every tensor."""
    if isinstance(batch, torch.Tensor):
        return (str(batch.dtype), tuple(batch.shape), batch.tolist())
    if isinstance(batch, Mapping):
        return {key: plain(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return (type(batch).__name__, [plain(value) for value in batch])
    return batch


class Recorder(pl.LightningModule):
    def __init__(self, unpack: Callable[[Any], list] = pair) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.unpack = unpack
        self.seen: list[Any] = []
        self.consumed = 0

    def record(self, batch: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        self.seen.append(plain(batch))
        pairs = self.unpack(batch)
        self.consumed += sum(len(x) for x, _ in pairs)
        return pairs

    def loss(self, batch: Any, net: Callable[[torch.Tensor], torch.Tensor] | None = None) -> Any:
        net = net or self.net
        return sum(F.mse_loss(net(x).squeeze(-1), y) for x, y in self.record(batch))

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.loss(batch)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


class SelfCall(Recorder):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        return self.loss(batch, self)


class Manual(Recorder):
    def __init__(self, unpack: Callable[[Any], list] = pair) -> None:
        super().__init__(unpack)
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(self.loss(batch))
        opt.step()


class TwoOptimizers(Manual):
    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        (x, y), *_ = self.record(batch)
        for opt, net in zip(self.optimizers(), (self.net, self.head)):
            opt.zero_grad()
            self.manual_backward(F.mse_loss(net(x).squeeze(-1), y))
            opt.step()

    def configure_optimizers(self) -> Any:
        return [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (self.net, self.head)]


class Validated(Recorder):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x).squeeze(-1), y))


class WithHook(Recorder):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(Rows(), batch_size=4)


class Data(pl.LightningDataModule):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(Rows(), batch_size=4, shuffle=True)


# -- the cells ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    model: Recorder
    global_step: int | None = None


@dataclass
class Cell:
    """One training cell: its data, model and Trainer arguments; what each mode must give."""

    data: Callable[[], Any] | None
    model: Callable[[], Recorder] = Recorder
    trainer: dict[str, Any] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)  # run label -> message pattern
    noted: dict[str, str] = field(default_factory=dict)  # run label -> note pattern
    streamed: tuple[str, ...] = ()  # run labels of a stream's other worker count: it only runs
    steps: int | None = STEPS
    prefix: bool = False  # stops on time: the shorter run's batches begin the longer one's

    def train(self, outcomes: list[Outcome]) -> None:
        torch.manual_seed(0)
        random.seed(0)
        options = {"accelerator": "cpu", "devices": 1, "max_steps": STEPS, **self.trainer}
        trainer = pl.Trainer(**QUIET_TRAINER, **options)
        model = self.model()
        outcomes.append(Outcome(model))
        data = self.data() if self.data is not None else None
        if isinstance(data, pl.LightningDataModule):
            trainer.fit(model, datamodule=data)
        elif isinstance(data, tuple):  # training and validation loaders
            trainer.fit(model, *data)
        elif data is not None:
            trainer.fit(model, data)
        else:
            trainer.fit(model)
        outcomes[-1].global_step = trainer.global_step


def rows(dataset: Dataset | None = None, **kw: Any) -> Callable[[], DataLoader]:
    return lambda: DataLoader(Rows() if dataset is None else dataset, **{"batch_size": 4, **kw})


def two(**kw: Any) -> tuple[DataLoader, DataLoader]:
    return rows(**kw)(), DataLoader(Rows(20), batch_size=2)


STREAM_REPEATS = r"--workers 2: each of the 2 workers repeats the whole Stream stream"
ITERABLE_PRELOAD = r"--preload ram: (Sharded)?Stream is an IterableDataset"
NOT_REBUILT = r"not applied.*OwnLoader"

CELLS = {
    # DataLoader forms
    "batch_size": Cell(rows()),
    "batch_size=None": Cell(rows(dataset=WholeBatches(12), batch_size=None)),
    "IterableDataset": Cell(
        rows(dataset=Stream()),
        refused={"workers=2": STREAM_REPEATS, "preload=ram": ITERABLE_PRELOAD},
    ),
    "IterableDataset, 2 workers": Cell(
        rows(dataset=Stream(), num_workers=2),
        refused={"workers=2": STREAM_REPEATS, "preload=ram": ITERABLE_PRELOAD},
        streamed=("workers=0",),
    ),
    "IterableDataset, sharded": Cell(
        rows(dataset=ShardedStream(), num_workers=2),
        refused={"preload=ram": ITERABLE_PRELOAD},
        streamed=("workers=0",),
    ),
    "collate_fn": Cell(rows(collate_fn=to_dict), lambda: Recorder(dict_pair)),
    "sampler": Cell(rows(sampler=EveryThirdBackwards(48))),
    "batch_sampler": Cell(lambda: DataLoader(Rows(), batch_sampler=GrowingBatches(48))),
    "drop_last": Cell(rows(dataset=Rows(18), drop_last=True)),
    "shuffle": Cell(rows(shuffle=True)),
    "shuffle, random draws per sample": Cell(rows(dataset=Noisy(), shuffle=True)),
    "shuffle, 2 epochs": Cell(rows(dataset=Rows(18), shuffle=True)),
    "shuffle, 2 workers": Cell(rows(dataset=Rows(18), shuffle=True, num_workers=2)),
    "shuffle, persistent workers": Cell(
        rows(dataset=Rows(18), shuffle=True, num_workers=2, persistent_workers=True)
    ),
    "generator": Cell(lambda: rows(shuffle=True, generator=torch.Generator().manual_seed(1))()),
    "worker_init_fn": Cell(
        rows(num_workers=2, worker_init_fn=seed_worker),
        noted={"workers=0": r"worker_init_fn runs only in worker processes"},
    ),
    "prefetch_factor": Cell(rows(num_workers=2, prefetch_factor=4)),
    "persistent_workers": Cell(rows(dataset=Rows(18), num_workers=2, persistent_workers=True)),
    "own DataLoader class": Cell(
        lambda: OwnLoader(Rows(), batch_size=4),
        noted={"workers=0": NOT_REBUILT, "workers=2": NOT_REBUILT, "preload=ram": NOT_REBUILT},
    ),
    "dict of loaders": Cell(lambda: dict(zip("ab", two())), lambda: Recorder(per_loader)),
    "list of loaders": Cell(lambda: list(two()), lambda: Recorder(per_loader)),
    "CombinedLoader": Cell(
        lambda: CombinedLoader(dict(zip("ab", two(shuffle=True))), "max_size_cycle"),
        lambda: Recorder(per_loader),
        refused={"workers=2": r"--workers 2: Rows is shuffled from torch's global random state"},
    ),
    "CombinedLoader, own generators": Cell(
        lambda: CombinedLoader(
            dict(zip("ab", two(shuffle=True, generator=torch.Generator().manual_seed(1)))),
            "max_size_cycle",
        ),
        lambda: Recorder(per_loader),
    ),
    "LightningDataModule": Cell(Data),
    "train_dataloader hook": Cell(None, WithHook),
    # batches the samples are counted from
    "dict batch": Cell(rows(dataset=DictRows()), lambda: Recorder(dict_pair)),
    "nested batch": Cell(rows(dataset=NestedRows()), lambda: Recorder(nested_pair)),
    # module and Trainer styles
    "self(x)": Cell(rows(), SelfCall),
    "manual optimization": Cell(rows(), Manual),
    "two optimizers": Cell(rows(), TwoOptimizers),
    "accumulate_grad_batches": Cell(rows(), trainer={"accumulate_grad_batches": 2}),
    "gradient clipping": Cell(rows(), trainer={"gradient_clip_val": 0.1}),
    "val_check_interval": Cell(
        lambda: (rows()(), DataLoader(Rows(8), batch_size=4)),
        Validated,
        trainer={"val_check_interval": 2, "limit_val_batches": 1},
    ),
    "limit_train_batches": Cell(
        rows(), trainer={"limit_train_batches": 2, "max_epochs": 2}, steps=None
    ),
    "max_time": Cell(
        rows(dataset=Rows(4000)),
        trainer={"max_time": timedelta(seconds=0.3), "max_steps": -1},
        steps=None,
        prefix=True,
    ),
}


def run_label(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "no knobs"


def differences(run: RunResult, outcome: Outcome, alone: Outcome, cell: Cell) -> list[str]:
    """How a profiled run differs from the cell alone, or from the refusal it should be."""
    label = run_label(run.knobs)
    seen, expected = outcome.model.seen, alone.model.seen
    if label in cell.refused:
        if run.error is None or "\n" in run.error:
            return [f"{label}: not refused in one line ({run.error!r})"]
        if not re.search(cell.refused[label], run.error):
            return [f"{label}: refused with {run.error!r}"]
        return [f"{label}: {len(seen)} steps trained before the refusal"] if seen else []
    if run.error is not None:
        return [f"{label}: {run.error}"]
    if label in cell.streamed:
        return []
    problems = []
    if cell.prefix:  # stopped on time: one run's batches start the other's
        common = min(len(seen), len(expected))
        same = common > 0 and seen[:common] == expected[:common]
    else:
        same = seen == expected and outcome.global_step == alone.global_step
    if not same:
        first = next((i for i, (a, b) in enumerate(zip(seen, expected)) if a != b), None)
        problems.append(f"{label}: other batches ({len(seen)} vs {len(expected)}, from {first})")
    if (run.steps, run.samples) != (len(seen), outcome.model.consumed):
        problems.append(
            f"{label}: counted {run.steps} steps, {run.samples} samples; the steps took "
            f"{len(seen)} batches, {outcome.model.consumed} samples"
        )
    if label in cell.noted and not any(re.search(cell.noted[label], n) for n in run.notes):
        problems.append(f"{label}: no note {cell.noted[label]!r} in {run.notes}")
    return problems


@pytest.mark.parametrize("name", list(CELLS))
def test_profiling_never_changes_the_batches_a_cell_sees(name: str) -> None:
    cell = CELLS[name]
    alone: list[Outcome] = []
    cell.train(alone)
    assert alone[0].model.seen and alone[0].global_step  # the cell trains on its own
    problems = []
    for options in MODES.values():
        outcomes: list[Outcome] = []
        sweep = profile_train(
            lambda: cell.train(outcomes),  # noqa: B023 (called before the loop moves on)
            **options,
            steps=cell.steps,
            warmup=1,
            live=False,
            store=False,
        )
        assert len(sweep.runs) == len(outcomes)
        for run, outcome in zip(sweep.runs, outcomes):
            problems += differences(run, outcome, alone[0], cell)
    assert not problems, "\n".join(problems)


def test_a_refusal_is_one_line_on_screen_not_a_traceback(capsys: pytest.CaptureFixture) -> None:
    cell = CELLS["IterableDataset"]
    profile_train(lambda: cell.train([]), preload="ram", steps=STEPS, live=False, store=False)
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(ITERABLE_PRELOAD + r"[^\n]*", err), err
