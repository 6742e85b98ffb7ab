"""Rebuilding a training DataLoader with other knob values, and shutting loaders down.

The rebuilt loader makes the same batches: it keeps everything the user chose that the knobs do
not set (dataset, sampler and so shuffling, batch_sampler, collate_fn, drop_last,
worker_init_fn, generator). A knob that would change the batches is refused
(``WorkerSetupError``); a loader that cannot be rebuilt says so (``rebuild_refusal``).
"""

from __future__ import annotations

import copy
import inspect
import multiprocessing
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from speedlab.measure.compat import is_combined_loader
from speedlab.measure.machine import usable_cores
from speedlab.run.knobs import KnobError, KnobRefused, Knobs

if TYPE_CHECKING:
    from speedlab.measure.pipeline import StampSink


_BATCH_ARGS = {"self", "dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "drop_last"}


class WorkerSetupError(KnobRefused):
    """These workers cannot serve this DataLoader as the cell's own do; the message says why."""


def resolve_workers(value: int | str, devices: int, notes: list[str]) -> int:
    if value != "auto":
        return int(value)
    cores = usable_cores()
    workers = max(0, (cores - devices) // devices)
    notes.append(
        f"workers=auto resolved to {workers}: ({cores} cores - {devices} device(s)) / {devices}."
    )
    return workers


def defined_in_notebook(obj: Any) -> bool:
    """Whether obj's class (or obj, for functions) lives in ``__main__``, as notebook code does."""
    if obj is None:
        return False
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    return getattr(target, "__module__", None) == "__main__"


def worker_context(loader_kwargs: dict[str, Any], notes: list[str]) -> Any:
    """The multiprocessing context workers need to see notebook-defined classes.

    Worker processes started with spawn or forkserver re-import the dataset's class by name;
    a class defined in a notebook (``__main__``) cannot be found that way ("Can't get
    attribute"). Fork copies the parent instead, so use it where the platform allows it.
    """
    if loader_kwargs["num_workers"] == 0 or loader_kwargs.get("multiprocessing_context"):
        return loader_kwargs.get("multiprocessing_context")
    method = (
        multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context()._name
    )
    user_parts = [
        loader_kwargs["dataset"],
        loader_kwargs.get("collate_fn"),
        loader_kwargs.get("worker_init_fn"),
    ]
    notebook_parts = [p for p in user_parts if defined_in_notebook(p)]
    if method == "fork" or not notebook_parts:
        return None
    name = getattr(notebook_parts[0], "__name__", type(notebook_parts[0]).__name__)
    if sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods():
        notes.append(
            f"{name} is defined in the notebook and workers start with '{method}' here, which "
            "cannot import it: speedlab started the workers with 'fork' instead."
        )
        return multiprocessing.get_context("fork")
    raise WorkerSetupError(
        f"--workers {loader_kwargs['num_workers']}: {name} is defined in the notebook, and on "
        f"this platform workers start with '{method}', which cannot import it. Move it into a "
        ".py file next to the notebook and import it from there, or use --workers 0."
    )


def rebuild_refusal(loader: Any) -> str | None:
    """Why ``loader`` cannot be rebuilt to make the same batches; ``None`` when it can."""
    from torch.utils.data import DataLoader

    from speedlab.measure.pipeline import StampedDataLoader

    if type(loader) in (DataLoader, StampedDataLoader):
        return None
    name = type(loader).__name__
    if isinstance(loader, DataLoader):
        return f"the training DataLoader is a {name}, a subclass speedlab cannot rebuild"
    return f"the training data ({name}) is not a DataLoader"


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


def _batching(loader: Any, dataset: Any, knobs: Knobs, notes: list[str]) -> dict[str, Any]:
    """The DataLoader arguments that make ``loader``'s batches: batch_size or batch_sampler."""
    from torch.utils.data import IterableDataset

    sampler = {} if isinstance(dataset, IterableDataset) else {"sampler": loader.sampler}
    if loader.batch_size is not None:
        size = knobs.batch_size or loader.batch_size
        return {"batch_size": size, "drop_last": loader.drop_last, **sampler}
    if knobs.batch_size is not None:
        what = "a batch_sampler" if loader.batch_sampler is not None else "batch_size=None"
        notes.append(
            f"batch_size={knobs.batch_size} was not applied: the DataLoader has {what}, "
            "which sets the batches itself."
        )
    if loader.batch_sampler is not None:  # the user's own batch_sampler decides the batches
        return {"batch_sampler": loader.batch_sampler}
    return {"batch_size": None, **sampler}  # each item is already a batch


def _check_workers(loader: Any, dataset: Any, knobs: Knobs, workers: int, several: bool) -> None:
    """Refuse a worker count that would change the batches: an IterableDataset's, or, among
    several training loaders, the order of one shuffled from torch's global random state."""
    from torch.utils.data import IterableDataset

    before = f"--workers {knobs.workers}: {type(dataset).__name__}"
    if isinstance(dataset, IterableDataset) and workers != loader.num_workers:
        raise WorkerSetupError(
            f"{before} is an IterableDataset, and each worker runs its own copy of __iter__, "
            f"so {workers} workers instead of the cell's {loader.num_workers} would change the "
            "batches training_step sees. Set num_workers in the cell instead."
        )
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
    notes: list[str],
    stamps: StampSink | None = None,
    several: bool = False,
) -> Any:
    """A new DataLoader over ``dataset`` making ``loader``'s batches, with the knobs' workers,
    pin_memory, persistence and batch size; every other argument is the loader's own.
    ``several``: the loader is one of several training loaders.

    It is a ``StampedDataLoader``: with ``stamps``, its workers' batch timestamps go there.
    """
    from torch.utils.data import DataLoader

    from speedlab.measure.pipeline import StampedDataLoader

    workers = (
        loader.num_workers
        if knobs.workers is None
        else resolve_workers(knobs.workers, devices, notes)
    )
    _check_workers(loader, dataset, knobs, workers, several)
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
    kwargs |= _batching(loader, dataset, knobs, notes) | {
        "dataset": dataset,
        "num_workers": workers,
        "pin_memory": pin,
        "persistent_workers": persistent,
        "prefetch_factor": (loader.prefetch_factor or 2) if workers > 0 else None,
    }
    kwargs["multiprocessing_context"] = worker_context(kwargs, notes)
    seeds = getattr(loader, "seed_every_epoch", None)  # a stand-in's: the cell's loader's way
    seeds = not loader.persistent_workers if seeds is None else seeds
    try:
        return StampedDataLoader(**kwargs, stamps=stamps, seed_every_epoch=seeds)
    except ValueError as err:
        raise KnobError("workers", workers, f"settings the DataLoader accepts ({err})") from None


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
