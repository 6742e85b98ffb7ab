"""Rebuilding a training DataLoader with other knob values, and shutting loaders down.

The rebuilt loader keeps everything the user chose that the knobs do not set: dataset, sampler
(and so shuffling), collate_fn, drop_last, worker_init_fn, generator.
"""

from __future__ import annotations

import inspect
import multiprocessing
import sys
from typing import TYPE_CHECKING, Any

from speedlab.measure.machine import usable_cores
from speedlab.run.knobs import KnobError, Knobs

if TYPE_CHECKING:
    from speedlab.measure.pipeline import StampSink


class WorkerSetupError(RuntimeError):
    """Workers cannot start on this platform with this dataset; the message says the fix."""


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


def rebuild_loader(
    loader: Any,
    knobs: Knobs,
    *,
    dataset: Any,
    devices: int,
    notes: list[str],
    stamps: StampSink | None = None,
) -> Any:
    """A new DataLoader over ``dataset`` with the knobs' workers, pin_memory, persistence, batch.

    It is a ``StampedDataLoader``: with ``stamps``, its workers' batch timestamps go there.
    """
    from torch.utils.data import DataLoader, IterableDataset

    from speedlab.measure.pipeline import StampedDataLoader

    workers = (
        loader.num_workers
        if knobs.workers is None
        else resolve_workers(knobs.workers, devices, notes)
    )
    persistent = (
        loader.persistent_workers if knobs.persistent_workers is None else knobs.persistent_workers
    )
    if persistent and workers == 0:
        persistent = False
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
    kwargs: dict[str, Any] = {
        "dataset": dataset,
        "num_workers": workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": pin,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "generator": loader.generator,
        "persistent_workers": persistent,
        "multiprocessing_context": loader.multiprocessing_context,
        "prefetch_factor": (loader.prefetch_factor or 2) if workers > 0 else None,
    }
    if "in_order" in inspect.signature(DataLoader).parameters:
        kwargs["in_order"] = loader.in_order
    if loader.batch_size is None:  # a custom batch_sampler decides the batches
        kwargs["batch_sampler"] = loader.batch_sampler
        if knobs.batch_size is not None:
            notes.append(
                f"batch_size={knobs.batch_size} was not applied: the DataLoader uses a custom "
                "batch_sampler, which sets the batch size itself."
            )
    else:
        kwargs["batch_size"] = knobs.batch_size or loader.batch_size
        kwargs["drop_last"] = loader.drop_last
        if not isinstance(dataset, IterableDataset):
            kwargs["sampler"] = loader.sampler
    kwargs["multiprocessing_context"] = worker_context(kwargs, notes)
    try:
        return StampedDataLoader(**kwargs, stamps=stamps)
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
