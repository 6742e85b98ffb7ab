"""Worker timestamps: when each DataLoader worker made each batch, for the pipeline timeline.

A ``StampedDataLoader`` is an ordinary DataLoader with one addition. In each worker process
(and only there) the fetcher that builds a batch is wrapped, so every batch leaves the worker as
a ``Stamped``: the user's batch plus the worker id and two ``perf_counter`` readings. The
loader's iterator unwraps it in the main process before Lightning sees the batch, and hands the
stamps to a sink (``probe_sink``: into the run's SpeedProbe records). The dataset, sampler and
collate_fn are the user's own, untouched; ``loader.worker_init_fn`` and ``loader.collate_fn``
keep their values.

``perf_counter`` is a system-wide monotonic clock on Linux, macOS and Windows, so worker and
main-process readings compare directly. With ``num_workers=0`` nothing is stamped: the main
process loads every batch itself, and the step records already hold that time as data_time.

The recorded stamps live in ``RunResult.records["pipeline"]`` as parallel lists (``worker``,
``start``, ``end``, ``taken``), in seconds since the fit started like the step records' ``t``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.pin_memory import pin_memory

PIPELINE_KEYS = ("worker", "start", "end", "taken")
_perf = time.perf_counter


class Stamped:
    """A batch on its way from a worker: who made it and when (``perf_counter`` seconds)."""

    __slots__ = ("batch", "end", "start", "worker")

    def __init__(self, batch: Any, worker: int, start: float, end: float) -> None:
        self.batch, self.worker, self.start, self.end = batch, worker, start, end

    def __reduce__(self) -> tuple[type, tuple[Any, int, float, float]]:
        return Stamped, (self.batch, self.worker, self.start, self.end)

    def pin_memory(self) -> Stamped:
        """Called by DataLoader's pin-memory thread: pin the batch, keep the stamps."""
        self.batch = pin_memory(self.batch)
        return self


#: Receives each handed-out batch's stamps: worker id, start, end, taken (perf_counter seconds).
StampSink = Callable[[int, float, float, float], None]

#: Sees each batch a worker made, with the worker's id, as the main process takes it; it may
#: raise to stop the run, and the loader's workers are then ended.
BatchWatch = Callable[[int, Any], None]


def probe_sink(probe: Any) -> StampSink:
    """A StampSink that writes into a SpeedProbe's ``records["pipeline"]``.

    Times become seconds since the probe's fit started (the clock of ``records["t"]``). The
    probe's records are the dict its RunResult holds, so the stamps reach the result as they
    are; stamps that arrive before the fit started are dropped.
    """

    def add(worker: int, start: float, end: float, taken: float) -> None:
        t0 = getattr(probe, "_t0", None)  # set when the probe's fit starts
        if t0 is None:
            return
        log = probe.records.get("pipeline")
        if log is None:
            log = probe.records["pipeline"] = {key: [] for key in PIPELINE_KEYS}
        log["worker"].append(worker)
        log["start"].append(start - t0)
        log["end"].append(end - t0)
        log["taken"].append(taken - t0)

    return add


class _StampingWorkerInit:
    """The worker_init_fn a StampedDataLoader's workers run: the user's, then the stamping hook."""

    def __init__(self, user_init: Callable[[int], None] | None) -> None:
        self.user_init = user_init

    def __call__(self, worker_id: int) -> None:
        if self.user_init is not None:
            self.user_init(worker_id)
        _stamp_fetchers(worker_id)


def _stamp_fetchers(worker_id: int) -> None:
    """In this worker process only: every fetcher made from now on returns ``Stamped`` batches.

    The worker loop builds its fetcher right after worker_init_fn (and again each epoch with
    persistent workers) through ``_DatasetKind.create_fetcher``; this process is the worker's
    own, so the change ends with it.
    """
    from torch.utils.data.dataloader import _DatasetKind

    create = _DatasetKind.create_fetcher

    def create_fetcher(*args: Any, **kwargs: Any) -> Any:
        fetcher = create(*args, **kwargs)
        fetch = fetcher.fetch

        def stamped_fetch(index: Any) -> Stamped:
            start = _perf()
            batch = fetch(index)
            return Stamped(batch, worker_id, start, _perf())

        fetcher.fetch = stamped_fetch
        return fetcher

    _DatasetKind.create_fetcher = staticmethod(create_fetcher)


class _Unstamped(Iterator):
    """Iterates a DataLoader iterator, handing the user's batches on, the stamps to a sink and
    the batches with their worker's id to a watch."""

    def __init__(self, batches: Iterator, sink: StampSink | None, watch: BatchWatch | None) -> None:
        self._batches = batches
        self._sink = sink
        self._watch = watch

    def __next__(self) -> Any:
        item = next(self._batches)
        if type(item) is not Stamped:
            return item
        if self._sink is not None:
            self._sink(item.worker, item.start, item.end, _perf())
        if self._watch is not None:
            try:
                self._watch(item.worker, item.batch)
            except BaseException:
                # The traceback keeps this iterator, and so its workers, alive: end them now.
                self._batches._shutdown_workers()  # type: ignore[attr-defined]
                raise
        return item.batch

    def __len__(self) -> int:
        return len(self._batches)


class StampedDataLoader(DataLoader):
    """A DataLoader whose workers stamp every batch; with ``stamps=None`` and ``watch=None`` a
    plain DataLoader.

    Takes DataLoader's arguments plus ``stamps``, the StampSink that receives each batch's
    stamps as the main process takes it, ``watch``, the BatchWatch that sees each batch with its
    worker's id, and ``seed_every_epoch``: whether the cell's own loader
    draws its workers' base seed every epoch (``not persistent_workers``; ``None``: as this one
    does). Lightning may re-create the loader (to inject a distributed sampler): it passes them
    on like any other argument.

    Example::

        seen = []
        loader = StampedDataLoader(dataset, batch_size=32, num_workers=2,
                                   stamps=lambda *stamp: seen.append(stamp))
    """

    def __init__(
        self,
        dataset: Any,
        *args: Any,
        stamps: StampSink | None = None,
        watch: BatchWatch | None = None,
        seed_every_epoch: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(dataset, *args, **kwargs)
        self.stamps = stamps
        self.watch = watch
        self.seed_every_epoch = seed_every_epoch
        self._epochs = 0

    def _stamping(self) -> bool:
        return (self.stamps is not None or self.watch is not None) and self.num_workers > 0

    def _get_iterator(self) -> Any:
        if not self._stamping():
            return super()._get_iterator()
        # Workers take worker_init_fn when the iterator starts them; the attribute keeps the
        # user's value the rest of the time.
        user_init = self.worker_init_fn
        self.worker_init_fn = _StampingWorkerInit(user_init)
        try:
            return super()._get_iterator()
        finally:
            self.worker_init_fn = user_init

    def __iter__(self) -> Iterator:
        batches = self._iter_seeded_as_the_cells()
        return _Unstamped(batches, self.stamps, self.watch) if self._stamping() else batches

    def _iter_seeded_as_the_cells(self) -> Iterator:
        """``DataLoader.__iter__``, taking the epoch's base seed from ``generator`` (torch's
        global one by default) only when the cell's own loader would: every epoch, or only the
        first with persistent workers. A RandomSampler without a generator draws its seed from
        the same global state, so this keeps the cell's shuffle order."""
        later, self._epochs = self._epochs > 0, self._epochs + 1
        draws = not self.persistent_workers
        cell_draws = draws if self.seed_every_epoch is None else self.seed_every_epoch
        if not later or draws == cell_draws:
            return super().__iter__()
        if cell_draws:  # persistent workers draw nothing: draw what the cell's loader would
            torch.empty((), dtype=torch.int64).random_(generator=self.generator)
            return super().__iter__()
        generator, self.generator = self.generator, torch.Generator().manual_seed(self._epochs)
        try:
            return super().__iter__()
        finally:
            self.generator = generator
