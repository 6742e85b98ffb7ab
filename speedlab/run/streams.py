"""Streams (IterableDatasets) under another worker count: what changes, and the mistake stopped.

Each DataLoader worker runs its own copy of a stream's ``__iter__``, and the loader takes the
workers' batches in turn. A stream that shards itself by ``get_worker_info()`` (LitData's
``StreamingDataset``, Hugging Face ``datasets``' ``IterableDataset``) trains on the same samples
with any worker count, in another order; one that does not repeats every sample once per
worker. ``RepeatCheck`` compares the first batch of each worker and stops such a stream before
it trains on the repeats. LitData's own ``StreamingDataLoader`` is rebuilt as itself
(``rebuild_litdata``): it counts what it yielded, for LitData's resumable state.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

from speedlab.measure.dataset import digest
from speedlab.results.knobs import KnobRefused

_SHARD_IT = "shard it with get_worker_info(), as LitData and datasets do"
# Elements of each tensor of a batch that its digest reads, evenly spaced: a 150 MB batch of
# images costs about 4 ms here (all of it, 0.8 s), and two workers' first batches of real data
# differ there.
_DIGEST_ELEMENTS = 1 << 16


class StreamRepeatsError(KnobRefused):
    """Two workers of a stream began with the same batch: the stream does not shard itself by
    worker, so every worker would train on the same samples."""


def is_stream(dataset: Any) -> bool:
    """Whether ``dataset`` is an IterableDataset, read through ``__iter__`` by every worker."""
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


def is_litdata_loader(loader: Any) -> bool:
    """Whether ``loader`` is LitData's ``StreamingDataLoader`` itself (not a subclass of it)."""
    cls = type(loader)
    return cls.__name__ == "StreamingDataLoader" and cls.__module__.split(".")[0] == "litdata"


def stream_notes(dataset: Any, workers: int, cell_workers: int) -> list[str]:
    """What ``workers`` workers instead of the cell's ``cell_workers`` change for a stream: the
    order of its batches, and with ``datasets`` the workers its shards leave idle."""
    if not is_stream(dataset) or workers == cell_workers:
        return []
    name = type(dataset).__name__
    notes = [
        f"workers={workers}: {name} is a stream, so its batches come in another order than "
        f"with the cell's {cell_workers} worker{'s' * (cell_workers != 1)}: each worker "
        "iterates its own share and the loader takes their batches in turn."
    ]
    shards = getattr(dataset, "num_shards", None)
    from_datasets = type(dataset).__module__.split(".")[0] == "datasets"
    if from_datasets and isinstance(shards, int) and 0 < shards < workers:
        notes.append(
            f"workers={workers}: {name} has {shards} shard{'s' * (shards > 1)} and datasets "
            f"gives each worker whole shards, so {workers - shards} of the {workers} workers get "
            "none and stay idle (the samples are the same); a dataset made with "
            f"to_iterable_dataset(num_shards={workers}) has one for each."
        )
    return notes


class RepeatCheck:
    """A ``BatchWatch`` that stops a stream whose workers repeat each other.

    It keeps a digest of the first batch of each worker, and raises ``StreamRepeatsError`` when
    one equals an earlier worker's. A stream every worker repeats is so stopped at the second
    worker's first batch: before that batch's step, and before the first one where Lightning
    fetches a batch ahead (as it does for a stream without ``len()``). Later batches cost one
    lookup; what the cell trains on is never changed.
    """

    def __init__(self, dataset: Any, workers: int, option: int | str) -> None:
        self.name = type(dataset).__name__
        self.workers = workers
        self.option = option
        self.first: dict[int, str] = {}

    def __call__(self, worker: int, batch: Any) -> None:
        if worker in self.first or len(self.first) == self.workers:
            return
        seen = digest(batch, _DIGEST_ELEMENTS)
        same = [w for w, earlier in self.first.items() if earlier == seen]
        self.first[worker] = seen
        if not same:
            return
        every = len(self.first) == self.workers and len(set(self.first.values())) == 1
        if every:
            what = f"each of the {self.workers} workers repeats the whole {self.name} stream"
        else:
            what = (
                f"workers {same[0]} and {worker} of {self.workers} repeat the same {self.name} "
                "samples"
            )
        raise StreamRepeatsError(
            f"--workers {self.option}: {what} (their first batches are equal): {_SHARD_IT}."
        )


def rebuild_litdata(loader: Any, kwargs: dict[str, Any]) -> Any:
    """A new ``StreamingDataLoader`` like ``loader``, with the DataLoader arguments ``kwargs``
    (its workers, batch size, pinning, persistence).

    Its own arguments (LitData's profiling ones) are read back from ``loader``; the dataset's
    shuffle and drop_last are left as they are, and ``collate_fn`` is the user's, not LitData's
    wrapper of it. The loader sets its worker count and batch size on its dataset, so it gets a
    copy: the cell's loader keeps its own. It starts at the cell's loader's epoch, which seeds
    LitData's shuffle.
    """
    from litdata.streaming.dataloader import StreamingDataLoaderCollateFn
    from torch.utils.data import DataLoader

    cls = type(loader)
    kwargs = {k: v for k, v in kwargs.items() if k not in ("drop_last", "sampler", "shuffle")}
    collate = kwargs.get("collate_fn")
    if isinstance(collate, StreamingDataLoaderCollateFn):
        kwargs["collate_fn"] = collate.collate_fn
    shared = inspect.signature(DataLoader.__init__).parameters
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name in shared or param.kind is not param.KEYWORD_ONLY:
            continue
        for attribute in (name, f"_{name}"):
            if hasattr(loader, attribute):
                kwargs[name] = getattr(loader, attribute)
                break
    kwargs["dataset"] = copy.copy(kwargs["dataset"])
    rebuilt = cls(**kwargs)
    rebuilt.current_epoch = loader.current_epoch
    return rebuilt
