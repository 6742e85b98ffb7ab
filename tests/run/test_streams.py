"""Streams under ``--workers`` (issue 27, item 5): a stream that shards itself by worker trains
on the same samples per epoch as the cell alone with that worker count; one that repeats itself
in every worker is stopped in one line before it trains on the repeats.

Every fit is real Lightning training with real DataLoader worker processes; the streams are
LitData's ``StreamingDataset`` (written by ``litdata.optimize``), a Hugging Face ``datasets``
iterable dataset built from a dict, and hand-written ones. Each sample carries its id, and the
model records the ids its training_step receives.
"""

from __future__ import annotations

import multiprocessing
import re
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER
from speedlab.results.knobs import Knobs
from speedlab.run.loaders import rebuild_loader
from speedlab.run.streams import RepeatCheck, StreamRepeatsError

N = 48  # samples per epoch
BATCH = 4
REPEATS = (
    r"--workers 2: each of the 2 workers repeats the whole {} stream \(their first batches are "
    r"equal\): shard it with get_worker_info\(\), as LitData and datasets do\."
)


def sample(i: int) -> dict[str, torch.Tensor]:
    return {"id": torch.tensor(i), "x": torch.arange(i, i + 4, dtype=torch.float32)}


class Stream(IterableDataset):
    """Every worker yields the whole stream: the mistake speedlab stops."""

    def indices(self) -> range:
        return range(N)

    def __iter__(self):
        return (sample(i) for i in self.indices())


class SizedStream(Stream):
    """With ``len()``, Lightning fetches no batch ahead of its step."""

    def __len__(self) -> int:
        return N


class ShardedStream(Stream):
    """Each worker yields every num_workers-th sample, from its own id."""

    def indices(self) -> range:
        info = get_worker_info()
        return range(N) if info is None else range(info.id, N, info.num_workers)


class Recorder(pl.LightningModule):
    """Records the sample ids each training_step receives, and the loader class it ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.ids: list[int] = []
        self.loader_class = ""

    def on_train_start(self) -> None:
        self.loader_class = type(self.trainer.train_dataloader).__name__

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        self.ids += batch["id"].tolist()
        return F.mse_loss(self.net(batch["x"]).squeeze(-1), batch["x"].sum(-1))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-4)


def cell(make_loader: Callable[[int], Any], workers: int, models: list[Recorder]) -> None:
    """The training cell: one epoch over the stream, its loader made with ``workers``."""
    torch.manual_seed(0)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, **QUIET_TRAINER)
    models.append(Recorder())
    trainer.fit(models[-1], make_loader(workers))


def alone(make_loader: Callable[[int], Any], workers: int) -> Recorder:
    models: list[Recorder] = []
    cell(make_loader, workers, models)
    return models[0]


# -- the three kinds of sharded stream ---------------------------------------------------------


@pytest.fixture(scope="module")
def litdata_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A LitData dataset of N samples in 3 chunks, written by ``litdata.optimize``.

    Outside a notebook optimize sets the process's start method to spawn (force=True), and its
    own SIGINT handler: it is asked for fork, and both are put back after it.
    """
    import litdata

    root = tmp_path_factory.mktemp("litdata")
    start_method = multiprocessing.get_start_method(allow_none=True)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("DATA_OPTIMIZER_CACHE_FOLDER", str(root / "cache"))
            patch.setenv("DATA_OPTIMIZER_DATA_CACHE_FOLDER", str(root / "data-cache"))
            litdata.optimize(
                fn=sample,
                inputs=list(range(N)),
                output_dir=str(root / "optimized"),
                chunk_size=16,
                num_workers=1,
                start_method="fork",
            )
    finally:
        multiprocessing.set_start_method(start_method, force=True)
        signal.signal(signal.SIGINT, sigint)
    return root / "optimized"


def litdata_loader(root: Path) -> Callable[[int], Any]:
    from litdata import StreamingDataLoader, StreamingDataset

    return lambda workers: StreamingDataLoader(
        StreamingDataset(str(root)), batch_size=BATCH, num_workers=workers
    )


def datasets_stream(shards: int) -> Any:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_DATASETS_OFFLINE", "1")  # read where datasets is first imported
        import datasets

    table = {"id": list(range(N)), "x": [[float(i + k) for k in range(4)] for i in range(N)]}
    return datasets.Dataset.from_dict(table).to_iterable_dataset(num_shards=shards)


def datasets_loader(workers: int) -> DataLoader:
    stream = datasets_stream(shards=2).with_format("torch")
    return DataLoader(stream, batch_size=BATCH, num_workers=workers)


def sharded_loader(workers: int) -> DataLoader:
    return DataLoader(ShardedStream(), batch_size=BATCH, num_workers=workers)


@pytest.mark.parametrize("kind", ["litdata", "datasets", "get_worker_info"])
def test_a_sharded_stream_trains_on_the_samples_it_does_alone_with_that_worker_count(
    kind: str, request: pytest.FixtureRequest
) -> None:
    make = {
        "litdata": lambda: litdata_loader(request.getfixturevalue("litdata_dir")),
        "datasets": lambda: datasets_loader,
        "get_worker_info": lambda: sharded_loader,
    }[kind]()
    expected = {workers: Counter(alone(make, workers).ids) for workers in (0, 2)}
    assert expected[0] == expected[2] == Counter(range(N))  # every sample once an epoch
    models: list[Recorder] = []
    sweep = profile_train(
        lambda: cell(make, 0, models), workers=[0, 2], warmup=1, live=False, store=False
    )
    assert [run.error for run in sweep.runs] == [None, None]
    for run, model, workers in zip(sweep.runs, models, (0, 2), strict=True):
        assert run.ran["workers"] == workers
        assert Counter(model.ids) == expected[workers], f"workers={workers}"
        assert run.samples == len(model.ids)  # every step counted, of the batches it took
    assert models[1].ids != models[0].ids  # two workers: another order
    order = [n for n in sweep.runs[1].notes if "is a stream, so its batches come in" in n]
    assert len(order) == 1, sweep.runs[1].notes
    if kind == "litdata":  # rebuilt as LitData's own loader, which counts what it yields
        assert [m.loader_class for m in models] == ["StreamingDataLoader"] * 2


def test_litdata_loader_is_rebuilt_as_itself_over_a_copy_of_its_dataset(
    litdata_dir: Path,
) -> None:
    loader = litdata_loader(litdata_dir)(0)
    dataset = loader.dataset
    rebuilt = rebuild_loader(loader, Knobs(workers=2), dataset=dataset, devices=1).loader
    assert type(rebuilt) is type(loader) and rebuilt.num_workers == 2
    assert rebuilt.dataset is not dataset and rebuilt.dataset.num_workers == 2
    assert dataset.num_workers == 1  # the cell's loader keeps its own (LitData's 1 for 0)
    assert rebuilt.collate_fn.collate_fn is loader.collate_fn.collate_fn  # not wrapped twice


def test_datasets_with_fewer_shards_than_workers_says_which_workers_idle() -> None:
    stream = datasets_stream(shards=1).with_format("torch")
    loader = DataLoader(stream, batch_size=BATCH)
    rebuilt = rebuild_loader(loader, Knobs(workers=2), dataset=stream, devices=1)
    idle = [n for n in rebuilt.notes if "1 of the 2 workers get none and stay idle" in n]
    assert len(idle) == 1, rebuilt.notes
    ids = [i for batch in rebuilt.loader for i in batch["id"].tolist()]
    assert ids == list(range(N))  # worker 0 yields the one shard: the samples are the same


# -- the stream that repeats itself ------------------------------------------------------------


@pytest.mark.parametrize("stream", [Stream, SizedStream])
def test_a_stream_repeated_by_every_worker_is_stopped_in_one_line(
    stream: type[Stream], capsys: pytest.CaptureFixture
) -> None:
    """Lightning fetches a batch ahead of its step where the stream has no len(), so no step
    trains on a repeat; with len() the first step (one batch, not yet a repeat) has run."""
    models: list[Recorder] = []

    def make(workers: int) -> DataLoader:
        return DataLoader(stream(), batch_size=BATCH, num_workers=workers)

    sweep = profile_train(
        lambda: cell(make, 0, models), workers=[0, 2], warmup=1, live=False, store=False
    )
    first, second = sweep.runs
    assert first.error is None and Counter(models[0].ids) == Counter(range(N))
    assert second.error is not None and "\n" not in second.error
    assert re.search(REPEATS.format(stream.__name__), second.error), second.error
    steps_before = 0 if stream is Stream else 1
    assert len(models[1].ids) == BATCH * steps_before
    assert not any("still alive" in n for n in second.notes), second.notes  # workers ended
    shown = capsys.readouterr().err.strip()
    assert re.fullmatch(REPEATS.format(stream.__name__), shown), shown


def test_the_cells_own_workers_are_not_watched_without_the_knob() -> None:
    """Without --workers speedlab changes nothing: the cell's own two workers of an unsharded
    stream train on their repeats, as the cell does alone."""
    models: list[Recorder] = []

    def make(workers: int) -> DataLoader:
        return DataLoader(Stream(), batch_size=BATCH, num_workers=workers)

    sweep = profile_train(lambda: cell(make, 2, models), warmup=1, live=False, store=False)
    assert sweep.runs[0].error is None
    assert Counter(models[0].ids) == Counter(alone(make, 2).ids) == Counter(2 * list(range(N)))


def test_repeat_check_names_the_workers_that_repeat_each_other() -> None:
    batches = [{"id": torch.arange(4 * k, 4 * k + 4)} for k in range(3)]
    check = RepeatCheck(Stream(), 3, "auto")
    check(0, batches[0])
    check(1, batches[1])
    check(0, batches[1])  # a worker's later batch is not compared
    with pytest.raises(StreamRepeatsError) as refused:
        check(2, batches[1])
    assert str(refused.value) == (
        "--workers auto: workers 1 and 2 of 3 repeat the same Stream samples (their first "
        "batches are equal): shard it with get_worker_info(), as LitData and datasets do."
    )
    sharded = RepeatCheck(Stream(), 2, 2)
    for worker, batch in enumerate(batches[:2]):
        sharded(worker, batch)
    sharded(1, batches[0])  # checked already: each worker's first batch only


def test_repeat_check_reads_a_large_batch_in_part_and_still_tells_batches_apart() -> None:
    images = torch.rand(2, 64, 3, 64, 64)  # 786k elements each, more than a digest reads
    check = RepeatCheck(Stream(), 2, 2)
    check(0, (images[0], torch.arange(64)))
    check(1, (images[1], torch.arange(64, 128)))  # another shard's batch passes
    repeat = RepeatCheck(Stream(), 2, 2)
    repeat(0, (images[0], torch.arange(64)))
    with pytest.raises(StreamRepeatsError, match="each of the 2 workers repeats the whole"):
        repeat(1, (images[0].clone(), torch.arange(64)))


STREAM_CELL = """
import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info
from speedlab.labs import QUIET_TRAINER
from tests.run.test_streams import N, Recorder, sample

class Rows(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        shard = range(N) if info is None or not SHARDED else range(info.id, N, info.num_workers)
        return (sample(i) for i in shard)

model = Recorder()
models.append(model)
trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, **QUIET_TRAINER)
trainer.fit(model, DataLoader(Rows(), batch_size=4))
"""


@pytest.mark.parametrize("sharded", [True, False])
def test_the_magic_runs_a_stream_defined_in_the_notebook_or_stops_it_in_one_line(
    shell: Any, sharded: bool, capsys: pytest.CaptureFixture
) -> None:
    shell.user_ns |= {"SHARDED": sharded, "models": []}
    sweep = shell.run_cell_magic(
        "profile_train", "--workers 0,2 --warmup 1 --no-live -o", STREAM_CELL
    )
    models = shell.user_ns["models"]
    assert sweep.runs[0].error is None and Counter(models[0].ids) == Counter(range(N))
    if sharded:
        assert sweep.runs[1].error is None and Counter(models[1].ids) == Counter(range(N))
        return
    assert models[1].ids == []
    assert re.fullmatch(REPEATS.format("Rows"), capsys.readouterr().err.strip())
