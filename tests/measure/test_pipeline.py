"""Worker timestamps: the user's batches unchanged, stamps recorded, the timeline told by them."""

from __future__ import annotations

import statistics
import warnings

import lightning.pytorch as pl
import pytest
import torch
from lightning.fabric.utilities.data import _replace_dunder_methods
from lightning.pytorch.utilities.data import _update_dataloader
from torch.utils.data import DataLoader, SequentialSampler, get_worker_info
from torch.utils.data._utils.pin_memory import pin_memory

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER, KnownCostDataset, KnownCostModel, known_cost_loader
from speedlab.measure.pipeline import PIPELINE_KEYS, Stamped, StampedDataLoader
from speedlab.notebook.plots import epoch_starts, main_spans, overlap, worker_spans
from speedlab.results.run import RunResult
from speedlab.run.loaders import shutdown_loader

QUIET = dict(accelerator="cpu", **QUIET_TRAINER)

_SEEN_INIT: dict[str, int] = {}


def collate(samples: list) -> dict:
    """A user collate_fn with its own batch structure."""
    xs, ys = zip(*samples, strict=True)
    return {"x": torch.stack(xs), "y": torch.tensor(ys), "n": len(samples)}


def mark_worker(worker_id: int) -> None:
    _SEEN_INIT["id"] = worker_id + 100


class WorkerTagged(KnownCostDataset):
    """Each sample also says what the user's worker_init_fn left in its process."""

    def __getitem__(self, i: int):
        x, y = super().__getitem__(i)
        return x, y, _SEEN_INIT.get("id", -1), get_worker_info().id if get_worker_info() else -1


class Collector:
    """A stamp sink that keeps what it receives."""

    def __init__(self) -> None:
        self.stamps: list[tuple[int, float, float, float]] = []

    def __call__(self, worker: int, start: float, end: float, taken: float) -> None:
        self.stamps.append((worker, start, end, taken))


def same_batches(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.keys() == y.keys()
        and all(torch.equal(torch.as_tensor(x[k]), torch.as_tensor(y[k])) for k in x)
        for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_are_the_users_own_and_stamps_are_ordered(workers: int) -> None:
    dataset = KnownCostDataset(48)
    plain = list(DataLoader(dataset, batch_size=8, num_workers=workers, collate_fn=collate))
    sink = Collector()
    loader = StampedDataLoader(
        dataset, batch_size=8, num_workers=workers, collate_fn=collate, stamps=sink
    )
    assert same_batches(list(loader), plain)
    assert loader.collate_fn is collate and loader.worker_init_fn is None
    if workers == 0:
        assert sink.stamps == []  # the main process loads: data_time already says it all
        return
    assert len(sink.stamps) == 6
    assert {w for w, *_ in sink.stamps} == {0, 1}
    assert all(start <= end <= taken for _, start, end, taken in sink.stamps)


def test_the_users_worker_init_fn_still_runs_in_each_worker() -> None:
    loader = StampedDataLoader(
        WorkerTagged(16),
        batch_size=4,
        num_workers=2,
        worker_init_fn=mark_worker,
        stamps=Collector(),
    )
    for _, _, init_marks, worker_ids in loader:
        assert torch.equal(init_marks, worker_ids + 100)
    assert loader.worker_init_fn is mark_worker


def test_persistent_workers_stamp_every_epoch() -> None:
    sink = Collector()
    loader = StampedDataLoader(
        KnownCostDataset(32), batch_size=8, num_workers=2, persistent_workers=True, stamps=sink
    )
    for _ in range(2):
        assert len(list(loader)) == 4
    assert len(sink.stamps) == 8
    loader._iterator._shutdown_workers()


def test_pin_memory_keeps_batch_and_stamps() -> None:
    pinned = pin_memory(Stamped(["a", 1], 1, 2.0, 3.0))  # what the pin-memory thread calls
    assert isinstance(pinned, Stamped) and pinned.batch == ["a", 1]
    assert (pinned.worker, pinned.start, pinned.end) == (1, 2.0, 3.0)
    sink = Collector()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pin_memory ... no accelerator is found" on a CPU
        loader = StampedDataLoader(
            KnownCostDataset(16), batch_size=8, num_workers=2, pin_memory=True, stamps=sink
        )
        batches = list(loader)
    assert [x.shape for x, _ in batches] == [torch.Size([8, 8])] * 2
    assert len(sink.stamps) == 2


@pytest.mark.parametrize("made_in_a_hook", [False, True])
def test_lightning_re_creating_the_loader_keeps_stamping(made_in_a_hook: bool) -> None:
    """Lightning re-instantiates loaders to inject samplers, from saved init args or attributes."""
    dataset = KnownCostDataset(24)
    sink = Collector()
    if made_in_a_hook:  # as inside a `train_dataloader` hook
        with _replace_dunder_methods(DataLoader, "dataset"):
            loader = StampedDataLoader(
                dataset, batch_size=8, num_workers=2, collate_fn=collate, stamps=sink
            )
    else:
        loader = StampedDataLoader(
            dataset, batch_size=8, num_workers=2, collate_fn=collate, stamps=sink
        )
    new = _update_dataloader(loader, SequentialSampler(dataset))
    assert type(new) is StampedDataLoader and new is not loader
    assert new.stamps is sink and new.collate_fn is collate
    assert [b["n"] for b in new] == [8, 8, 8]
    assert len(sink.stamps) == 3


def train_fn(epochs: int, n: int, **loader_kw):
    def train() -> None:
        loader = known_cost_loader(n=n, batch_size=8, busy_s=0.0015, **loader_kw)
        pl.Trainer(max_epochs=epochs, **QUIET).fit(KnownCostModel(step_s=0.006), loader)

    return train


def test_two_workers_make_batches_while_the_main_process_trains() -> None:
    run = profile_train(train_fn(1, 8 * 40), workers=2, store=False, live=False).runs[0]
    assert set(run.records["pipeline"]) == set(PIPELINE_KEYS)
    spans = worker_spans(run.records)
    _, trains = main_spans(run.records)
    assert sorted(spans) == [0, 1]
    for worker, batches in spans.items():
        assert len(batches) >= 15, worker
        # prefetching: this worker's batch-making overlaps the main process's training
        assert overlap(batches, trains) > 0.25 * sum(e - s for s, e in batches), worker


def test_without_persistent_workers_each_epoch_starts_with_a_gap() -> None:
    run = profile_train(
        train_fn(2, 8 * 12), workers=2, persistent_workers=False, store=False, live=False
    ).runs[0]
    records = run.records
    _, (_, second_epoch) = epoch_starts(records)
    spans = [span for batches in worker_spans(records).values() for span in batches]
    first_batch_of_epoch = min(start for start, _ in spans if start > second_epoch)
    gap = first_batch_of_epoch - second_epoch
    # new worker processes start up before any batch is made: nothing prefetched, nothing busy
    assert gap > 0.01, gap
    assert overlap(spans, [(second_epoch, first_batch_of_epoch)]) == 0
    i = records["epoch"].index(1)
    assert records["phase"][i] == "epoch_start"
    typical = statistics.median(records["data_time"][2:i])
    assert records["data_time"][i] > max(3 * typical, gap), (records["data_time"][i], typical)


def test_a_loader_as_the_cell_wrote_it_is_stamped_too() -> None:
    run = profile_train(train_fn(1, 8 * 12, num_workers=2), store=False, live=False).runs[0]
    assert sorted(worker_spans(run.records)) == [0, 1]
    again = RunResult.from_dict(run.to_dict())  # as the run store gives it back
    assert again.records["pipeline"] == run.records["pipeline"]


class OwnLoader(DataLoader):
    """A user's DataLoader subclass: left alone when no data knob asks for a rebuild."""

    iterations = 0

    def __iter__(self):
        OwnLoader.iterations += 1
        return super().__iter__()


def test_a_custom_loader_class_is_not_replaced_without_data_knobs() -> None:
    def train() -> None:
        loader = OwnLoader(KnownCostDataset(40), batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.001), loader)

    OwnLoader.iterations = 0
    run = profile_train(train, store=False, live=False).runs[0]
    assert OwnLoader.iterations == 1 and run.steps == 5
    assert "pipeline" not in run.records


@pytest.mark.parametrize(
    ("cell", "stand_in"),
    [
        ({"num_workers": 0}, {"num_workers": 2, "persistent_workers": True}),
        ({"num_workers": 2, "persistent_workers": True}, {"num_workers": 0}),
    ],
)
def test_a_stand_in_loader_shuffles_every_epoch_as_the_cells_own(
    cell: dict, stand_in: dict
) -> None:
    """Persistent workers draw no base seed after the first epoch; a RandomSampler without a
    generator seeds from the same global state, so the stand-in draws as the cell's loader."""

    def epochs(loader: DataLoader) -> list[list[int]]:
        torch.manual_seed(0)
        orders = [torch.cat(list(loader)).tolist() for _ in range(3)]
        shutdown_loader(loader)
        return orders

    data = list(range(12))
    own = epochs(DataLoader(data, batch_size=4, shuffle=True, **cell))
    seeds = not cell.get("persistent_workers", False)
    rebuilt = StampedDataLoader(
        data, batch_size=4, shuffle=True, seed_every_epoch=seeds, **stand_in
    )
    assert epochs(rebuilt) == own
    assert len({tuple(order) for order in own}) == 3  # each epoch its own order
