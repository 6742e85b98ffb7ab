"""Rebuilding a training DataLoader with other knob values, and shutting loaders down.

The rebuilt loader makes the same batches: it keeps everything the user chose that the knobs do
not set (dataset, sampler and so shuffling, batch_sampler, collate_fn, drop_last,
worker_init_fn, generator). A knob that would change the batches is refused
(``WorkerSetupError``); a loader that cannot be rebuilt says so (``rebuild_refusal``). A stream
(an IterableDataset) is the exception: its batches follow its workers, so another worker count
trains on the same samples in another order, and a stream that repeats itself in every worker
is stopped (``speedlab.run.streams``).

What a rebuild noted comes back with the loader (``Rebuilt``), and a class defined in the
notebook that workers could not import is a fact, not a sentence: ``Rebuilt.notebook_class``
when speedlab forked the workers for it, ``NotebookClassError`` when it could not.
"""

from __future__ import annotations

import copy
import inspect
import multiprocessing
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from speedlab.measure.compat import is_combined_loader
from speedlab.measure.machine import start_method, usable_cores
from speedlab.results.knobs import KnobError, KnobRefused, Knobs
from speedlab.run.streams import (
    RepeatCheck,
    is_litdata_loader,
    is_stream,
    rebuild_litdata,
    stream_notes,
)

if TYPE_CHECKING:
    from speedlab.measure.pipeline import StampSink


_BATCH_ARGS = {"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"}


class WorkerSetupError(KnobRefused):
    """These workers cannot serve this DataLoader as the cell's own do; the message says why."""


@dataclass(frozen=True)
class NotebookClass:
    """A class of a DataLoader's (its dataset's, collate_fn or worker_init_fn) defined in the
    notebook, which workers started with ``start_method`` cannot import by name.

    ``forked``: speedlab started the workers with fork instead, so the run worked here only
    because of that; otherwise the run was refused (``NotebookClassError``).
    """

    name: str
    start_method: str
    forked: bool

    def fact(self) -> dict[str, Any]:
        """The fact as a run's workload keeps it, under ``"notebook_class"``."""
        return {"name": self.name, "start_method": self.start_method, "forked": self.forked}

    def note(self) -> str:
        return (
            f"{self.name} is defined in the notebook and workers start with "
            f"'{self.start_method}' here, which cannot import it: speedlab started the workers "
            "with 'fork' instead."
        )


class NotebookClassError(WorkerSetupError):
    """Workers would start with spawn or forkserver, which cannot import a class defined in the
    notebook, and fork is not there to copy it: ``notebook_class`` says which class and how."""

    def __init__(self, workers: int, notebook_class: NotebookClass) -> None:
        self.workers = workers
        self.notebook_class = notebook_class
        super().__init__(
            f"--workers {workers}: {notebook_class.name} is defined in the notebook, and on this "
            f"platform workers start with '{notebook_class.start_method}', which cannot import "
            "it. Move it into a .py file next to the notebook and import it from there, or use "
            "--workers 0."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.workers, self.notebook_class)


@dataclass(frozen=True)
class Rebuilt:
    """A rebuilt DataLoader, what its rebuild noted (knobs resolved, or without effect here),
    and the class defined in the notebook its workers were forked for, if any."""

    loader: Any
    notes: tuple[str, ...] = ()
    notebook_class: NotebookClass | None = None


def resolve_workers(value: int | str, devices: int) -> tuple[int, str | None]:
    """The worker count for ``--workers value``, and a note on how ``auto`` resolved."""
    if value != "auto":
        return int(value), None
    cores = usable_cores()
    workers = max(0, (cores - devices) // devices)
    return workers, (
        f"workers=auto resolved to {workers}: ({cores} cores - {devices} device(s)) / {devices}."
    )


def defined_in_notebook(obj: Any) -> bool:
    """Whether obj's class (or obj, for functions) lives in ``__main__``, as notebook code does."""
    if obj is None:
        return False
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    return getattr(target, "__module__", None) == "__main__"


def worker_context(loader_kwargs: dict[str, Any]) -> tuple[Any, NotebookClass | None]:
    """The multiprocessing context workers need to see notebook-defined classes, and the
    notebook class it forks for (``None``: the loader's own context serves).

    Worker processes started with spawn or forkserver re-import the dataset's class by name;
    a class defined in a notebook (``__main__``) cannot be found that way ("Can't get
    attribute"). Fork copies the parent instead, so use it where the platform allows it;
    where it does not, raise ``NotebookClassError``.
    """
    if loader_kwargs["num_workers"] == 0 or loader_kwargs.get("multiprocessing_context"):
        return loader_kwargs.get("multiprocessing_context"), None
    method = start_method()
    user_parts = [
        loader_kwargs["dataset"],
        loader_kwargs.get("collate_fn"),
        loader_kwargs.get("worker_init_fn"),
    ]
    notebook_parts = [p for p in user_parts if defined_in_notebook(p)]
    if method == "fork" or not notebook_parts:
        return None, None
    name = getattr(notebook_parts[0], "__name__", type(notebook_parts[0]).__name__)
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork"), NotebookClass(name, method, forked=True)
    raise NotebookClassError(
        loader_kwargs["num_workers"], NotebookClass(name, method, forked=False)
    )


def rebuild_refusal(loader: Any) -> str | None:
    """Why ``loader`` cannot be rebuilt to make the same batches; ``None`` when it can."""
    from torch.utils.data import DataLoader

    from speedlab.measure.pipeline import StampedDataLoader

    if type(loader) in (DataLoader, StampedDataLoader) or is_litdata_loader(loader):
        return None
    name = type(loader).__name__
    if isinstance(loader, DataLoader):
        return f"the training DataLoader is a {name}, a subclass speedlab cannot rebuild"
    return f"the training data ({name}) is not a DataLoader"


def can_stamp(loader: Any) -> bool:
    """Whether a rebuild of ``loader`` stamps its workers' batches (LitData's own loader is
    rebuilt as itself, which does not)."""
    return rebuild_refusal(loader) is None and not is_litdata_loader(loader)


def map_loaders(source: Any, rebuild: Callable[[Any], Any]) -> Any:
    """``source`` with ``rebuild`` applied to each loader in it: a dict, list or tuple of them,
    or a Lightning ``CombinedLoader`` (copied: the user's keeps its own); else to ``source``."""
    if type(source) is dict:
        return {key: map_loaders(value, rebuild) for key, value in source.items()}
    if type(source) in (list, tuple):
        return type(source)(map_loaders(value, rebuild) for value in source)
    if is_combined_loader(source):
        combined = copy.copy(source)
        combined.flattened = [rebuild(loader) for loader in source.flattened]
        return combined
    return rebuild(source)


def _batching(loader: Any, dataset: Any, knobs: Knobs) -> tuple[dict[str, Any], str | None]:
    """The DataLoader arguments that make ``loader``'s batches (batch_size or batch_sampler),
    and a note when ``--batch-size`` could not apply."""
    sampler = {} if is_stream(dataset) else {"sampler": loader.sampler}
    if loader.batch_size is not None:
        size = knobs.batch_size or loader.batch_size
        return {"batch_size": size, "drop_last": loader.drop_last, **sampler}, None
    note = None
    if knobs.batch_size is not None:
        what = "a batch_sampler" if loader.batch_sampler is not None else "batch_size=None"
        note = (
            f"batch_size={knobs.batch_size} was not applied: the DataLoader has {what}, "
            "which sets the batches itself."
        )
    if loader.batch_sampler is not None:  # the user's own batch_sampler decides the batches
        return {"batch_sampler": loader.batch_sampler}, note
    return {"batch_size": None, **sampler}, note  # each item is already a batch


def _check_workers(loader: Any, dataset: Any, knobs: Knobs, workers: int, several: bool) -> None:
    """Refuse a worker count that would change the batches: among several training loaders, the
    order of one shuffled from torch's global random state."""
    before = f"--workers {knobs.workers}: {type(dataset).__name__}"
    samplers = (loader.sampler, getattr(loader.batch_sampler, "sampler", None))
    global_shuffle = any(getattr(s, "generator", False) is None for s in samplers)
    if several and global_shuffle and (workers == 0) != (loader.num_workers == 0):
        raise WorkerSetupError(
            f"{before} is shuffled from torch's global random state beside other training "
            f"loaders, and {workers} workers instead of the cell's {loader.num_workers} would "
            "draw its seed at another moment, so in another order. Give its DataLoader its own "
            "generator=torch.Generator().manual_seed(...) in the cell."
        )


def rebuild_loader(
    loader: Any,
    knobs: Knobs,
    *,
    dataset: Any,
    devices: int,
    stamps: StampSink | None = None,
    several: bool = False,
) -> Rebuilt:
    """A new DataLoader over ``dataset`` making ``loader``'s batches, with the knobs' workers,
    pin_memory, persistence and batch size; every other argument is the loader's own.
    ``several``: the loader is one of several training loaders.

    It is a ``StampedDataLoader`` (LitData's ``StreamingDataLoader`` stays one): with
    ``stamps``, its workers' batch timestamps go there; where ``--workers`` gives a stream
    several workers, a ``RepeatCheck`` watches their first batches. It comes back in a
    ``Rebuilt``, with the notes on how the knobs applied and the notebook class its workers were
    forked for.
    """
    from torch.utils.data import DataLoader

    from speedlab.measure.pipeline import StampedDataLoader

    notes: list[str] = []
    workers = loader.num_workers
    if knobs.workers is not None:
        workers, note = resolve_workers(knobs.workers, devices)
        notes += [note] if note else []
    _check_workers(loader, dataset, knobs, workers, several)
    notes += stream_notes(dataset, workers, loader.num_workers)
    if workers == 0 and loader.num_workers > 0 and loader.worker_init_fn is not None:
        notes.append(
            "workers=0: the DataLoader's worker_init_fn runs only in worker processes, so it "
            "did not run."
        )
    persistent = (
        loader.persistent_workers if knobs.persistent_workers is None else knobs.persistent_workers
    )
    if persistent and workers == 0:
        persistent = False
        if knobs.persistent_workers:
            notes.append(
                "persistent_workers=on does nothing with workers=0: there are no workers to keep."
            )
    pin = loader.pin_memory if knobs.pin_memory is None else knobs.pin_memory
    if pin:
        import torch

        if not torch.cuda.is_available():
            pin = False
            notes.append(
                "pin_memory=on has no effect without a CUDA GPU: there is no device copy to speed up."
            )
    own = inspect.signature(DataLoader.__init__).parameters.keys() - _BATCH_ARGS
    kwargs: dict[str, Any] = {name: getattr(loader, name) for name in own if hasattr(loader, name)}
    batching, note = _batching(loader, dataset, knobs)
    notes += [note] if note else []
    kwargs |= batching | {
        "dataset": dataset,
        "num_workers": workers,
        "pin_memory": pin,
        "persistent_workers": persistent,
        "prefetch_factor": (loader.prefetch_factor or 2) if workers > 0 else None,
    }
    kwargs["multiprocessing_context"], notebook_class = worker_context(kwargs)
    if notebook_class is not None:
        notes.append(notebook_class.note())
    seeds = getattr(loader, "seed_every_epoch", None)  # a stand-in's: the cell's loader's way
    seeds = not loader.persistent_workers if seeds is None else seeds
    check = knobs.workers is not None and workers > 1 and is_stream(dataset)
    try:
        if is_litdata_loader(loader):  # its StreamingDataset shards itself: nothing to watch
            rebuilt = rebuild_litdata(loader, kwargs)
        else:
            watch = RepeatCheck(dataset, workers, knobs.workers) if check else None
            rebuilt = StampedDataLoader(
                **kwargs, stamps=stamps, watch=watch, seed_every_epoch=seeds
            )
    except ValueError as err:
        raise KnobError("workers", workers, f"settings the DataLoader accepts ({err})") from None
    return Rebuilt(rebuilt, tuple(notes), notebook_class)


def shutdown_loader(loader: Any) -> None:
    """Stop a DataLoader's worker processes now, persistent ones included.

    Persistent workers live as long as the loader's iterator; a loader still referenced by a
    Trainer would keep them alive (see PyTorch issue 91252), so end them explicitly.
    """
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    if hasattr(loader, "_iterator"):
        loader._iterator = None
