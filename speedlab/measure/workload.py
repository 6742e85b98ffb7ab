"""What a fit trains, read from Lightning's own objects without touching a tensor's values:
the samples in a batch, how the training loaders load, and how long the cell means to train."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

from speedlab.measure.compat import batch_untouched, says_last_batch

_PAIRS = (list, tuple)


def batch_size_of(batch: Any) -> int:
    """Samples in a batch: the leading dimension of its first tensor, depth first (no sync)."""
    if type(batch) in _PAIRS and batch:  # (inputs, targets): the probe asks every step
        first = getattr(batch[0], "shape", None)
        if first and first[0]:
            return int(first[0])
    shape = getattr(batch, "shape", None)
    if shape is not None:
        return int(shape[0]) if len(shape) else 1
    # list and tuple first: the ABCs' checks cost more than the rest of a step's recording
    if isinstance(batch, _PAIRS) or (
        isinstance(batch, Sequence) and not isinstance(batch, (str, bytes))
    ):
        parts: Any = batch
    elif isinstance(batch, Mapping):
        parts = batch.values()
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        parts = (getattr(batch, f.name) for f in dataclasses.fields(batch))
    else:
        return 0
    for part in parts:
        size = batch_size_of(part)
        if size:
            return size
    return 0


def full_batch(trainer: Any, fetcher: Any) -> int | None:
    """The samples of each batch a fit trains but its loader's last, where torch's own batching
    fixes them: one training DataLoader of torch's own class over a map-style dataset, batched
    by torch's BatchSampler (full batches of indices but the last) and collated by
    ``default_collate`` (a leading row an index), with nothing of the user's between fetch and
    training (``batch_untouched``), read by Lightning's prefetching ``fetcher``, which is
    ``done`` as it hands over the last batch (a loader made anew each epoch comes with a
    fetcher of its own, and the first stays done: its later epochs are sized). None elsewhere, where each batch is sized: an
    iterable dataset's workers each end on a short batch, and a loader, sampler or collate of
    the user's own may batch otherwise."""
    from torch.utils.data import BatchSampler, DataLoader, IterableDataset, default_collate

    loader = getattr(trainer, "train_dataloader", None)
    plain = (
        type(loader) is DataLoader
        and type(loader.batch_sampler) is BatchSampler
        and loader.collate_fn is default_collate
        and not isinstance(loader.dataset, IterableDataset)
    )
    if plain and says_last_batch(fetcher) and batch_untouched(trainer):
        return loader.batch_sampler.batch_size
    return None


def last_batch(trainer: Any) -> tuple[int, int] | None:
    """The batches of the training loader whose batches ``full_batch`` fixes and the samples
    of its last, from its sampler's length; None where the sampler has no length, or where the
    loader is made anew each epoch (its batches may differ)."""
    batches = trainer.train_dataloader.batch_sampler
    if getattr(trainer, "reload_dataloaders_every_n_epochs", 0):
        return None
    try:
        n = len(batches.sampler)
    except TypeError:
        return None
    size = batches.batch_size
    return len(batches), size if batches.drop_last else n % size or size


def samples_of(batch: Any, loaders: Any) -> int:
    """Samples a step consumed. With several training loaders (a dict or list of them) the
    batch holds one batch of each, shaped like the loaders: their samples add up."""
    if isinstance(loaders, Mapping) and isinstance(batch, Mapping):
        return sum(samples_of(batch.get(key), part) for key, part in loaders.items())
    same_length = isinstance(batch, (list, tuple)) and len(batch) == len(loaders)
    if isinstance(loaders, (list, tuple)) and same_length:
        return sum(samples_of(b, part) for b, part in zip(batch, loaders))
    return batch_size_of(batch)


def each_loader(loaders: Any) -> list[Any]:
    """The training loaders: one loader, or those of a dict or list of them."""
    if isinstance(loaders, Mapping):
        return [one for part in loaders.values() for one in each_loader(part)]
    if isinstance(loaders, (list, tuple)):
        return [one for part in loaders for one in each_loader(part)]
    return [] if loaders is None else [loaders]


def loader_facts(loaders: Any) -> dict[str, Any]:
    """How the training loaders load, as they were built: their worker processes in all
    (``loader_workers``), and where they agree, each one's workers, whether they pin memory and
    keep their workers between epochs, and their batch size (a batch sampler's, where one makes
    the batches)."""
    flat = each_loader(loaders)
    workers = sum(int(getattr(one, "num_workers", 0) or 0) for one in flat)
    facts: dict[str, Any] = {"loader_workers": workers}
    for fact, read in (
        ("loader_num_workers", lambda one: getattr(one, "num_workers", None)),
        ("loader_pin_memory", lambda one: getattr(one, "pin_memory", None)),
        ("loader_persistent_workers", lambda one: getattr(one, "persistent_workers", None)),
        ("loader_batch_size", _batch_size),
    ):
        values = {read(one) for one in flat}
        if len(values) == 1 and None not in values:
            facts[fact] = values.pop()
    return facts


def _batch_size(loader: Any) -> int | None:
    size = getattr(loader, "batch_size", None)
    sampler = getattr(loader, "batch_sampler", None)
    return size if size is not None else getattr(sampler, "batch_size", None)


def workload_of(trainer: Any, own_max_steps: int | None = None) -> dict[str, Any]:
    """What a fit trains: its training loaders (``loader_facts``), its length
    (``training_plan``) and its devices."""
    return {
        **loader_facts(getattr(trainer, "train_dataloader", None)),
        **training_plan(trainer, own_max_steps),
        "devices": int(getattr(trainer, "num_devices", 1) or 1),
    }


def training_plan(trainer: Any, own_max_steps: int | None = None) -> dict[str, int]:
    """The fit's own length, as the cell wrote it: training batches an epoch (``epoch_steps``)
    and in all (``planned_steps``), where finite. ``own_max_steps`` is the cell's ``max_steps``
    where a caller replaced it to stop the run early (speedlab's ``--steps``): break-even
    figures are read against the training the cell would do, not the part measured."""
    per_epoch = getattr(trainer, "num_training_batches", math.inf)
    max_steps = trainer.max_steps if own_max_steps is None else own_max_steps
    limits = [per_epoch * trainer.max_epochs] if (trainer.max_epochs or -1) >= 0 else []
    if max_steps >= 0:
        limits.append(max_steps * trainer.accumulate_grad_batches)
    plan = {"epoch_steps": per_epoch, "planned_steps": min(limits, default=math.inf)}
    return {k: int(v) for k, v in plan.items() if math.isfinite(v)}
