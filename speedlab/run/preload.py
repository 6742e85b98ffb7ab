"""Preloading a training dataset into RAM or onto /dev/shm before a run.

``ram``: datasets with a ``load(i)``/``transform`` split get their ``load`` served from a cache
of decoded samples, so random augmentation still runs every step; any other dataset gets its
whole items cached (augmentation frozen, and the result says so).
``shm``: a dataset of files (``files`` and ``relocate(new_root)``, as the image lab has) is
copied under /dev/shm and pointed there; the copy is removed when the run ends.
Either leaves the random state as it was, so the cell shuffles as it does alone.
"""

from __future__ import annotations

import copy
import functools
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speedlab.measure.dataset import own_random_state
from speedlab.results.knobs import KnobRefused

SHM = Path("/dev/shm")
_ESTIMATE_FROM = 8  # samples loaded to estimate the memory of the whole set
_RAM_HEADROOM = 0.8  # use at most this share of the available RAM


class PreloadError(KnobRefused):
    """The data cannot be preloaded (it does not fit, or has no numbered samples); the message
    says why."""


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def nbytes(obj: Any) -> int:
    """Approximate memory of a decoded sample: images, tensors, arrays and their containers."""
    if hasattr(obj, "nbytes"):
        return int(obj.nbytes)
    if hasattr(obj, "element_size") and hasattr(obj, "numel"):
        return int(obj.element_size() * obj.numel())
    if hasattr(obj, "getbands") and hasattr(obj, "size"):  # PIL image
        width, height = obj.size
        return width * height * len(obj.getbands())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(nbytes(x) for x in obj.values())
    return sys.getsizeof(obj)


class _LoadCache:
    """``load(i)`` answered from memory; picklable, so spawn workers get it too."""

    def __init__(self, items: dict[int, Any]) -> None:
        self.items = items

    def __call__(self, i: int) -> Any:
        return self.items[i]


class CachedItems:
    """A dataset whose items were computed once (random augmentation frozen)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> Any:
        return self.items[i]


@dataclass
class Preloaded:
    """The dataset to train on and what to clean up after the run."""

    dataset: Any
    notes: list[str] = field(default_factory=list)
    cleanup_dir: Path | None = None

    def cleanup(self) -> None:
        if self.cleanup_dir is not None:
            shutil.rmtree(self.cleanup_dir, ignore_errors=True)
            self.cleanup_dir = None


def _owner(dataset: Any) -> Any:
    """See through ``torch.utils.data.Subset`` to the dataset that owns the samples."""
    while hasattr(dataset, "dataset") and hasattr(dataset, "indices"):
        dataset = dataset.dataset
    return dataset


def ram_cache(dataset: Any) -> str:
    """What ``--preload ram`` caches of ``dataset``: ``"loads"``, the decoded samples of a
    dataset with a ``load(i)``/``transform`` split (augmentation still runs every step), or
    ``"items"``, whole items (augmentation frozen)."""
    owner = _owner(dataset)
    split = callable(getattr(owner, "load", None)) and callable(getattr(owner, "transform", None))
    return "loads" if split else "items"


def _base_and_indices(dataset: Any) -> tuple[Any, list[int]]:
    """The dataset that owns the samples (``_owner``) and the indices of ``dataset``'s own
    samples in it."""
    indices = list(range(len(dataset)))
    while hasattr(dataset, "dataset") and hasattr(dataset, "indices"):
        indices = [dataset.indices[i] for i in indices]
        dataset = dataset.dataset
    return dataset, indices


def _rewrap(dataset: Any, base: Any) -> Any:
    """``dataset`` with its innermost dataset replaced by ``base`` (Subsets copied, not changed)."""
    if hasattr(dataset, "dataset") and hasattr(dataset, "indices"):
        outer = copy.copy(dataset)
        outer.dataset = _rewrap(dataset.dataset, base)
        return outer
    return base


def _check_ram(need: float, what: str) -> None:
    import psutil

    available = psutil.virtual_memory().available
    if need > _RAM_HEADROOM * available:
        raise PreloadError(
            f"--preload ram: {what} need about {_gb(need)}, more than the "
            f"{_gb(_RAM_HEADROOM * available)} speedlab allows ({_RAM_HEADROOM:.0%} of the "
            f"{_gb(available)} of RAM available). Use --preload off, or fewer or smaller samples."
        )


def _check_numbered(dataset: Any) -> None:
    """Refuse a dataset whose samples cannot be read ahead by number.

    A stream is refused even where it ends: training reads it through ``__iter__`` alone, which
    may shuffle every epoch (LitData, a shuffle buffer) and split it among the workers, so a copy
    read once would freeze one epoch's order and sharding, and one with no end never finishes.
    """
    from torch.utils.data import IterableDataset

    name = type(dataset).__name__
    if isinstance(dataset, IterableDataset):
        raise PreloadError(
            f"--preload ram: {name} is an IterableDataset: training reads it only through "
            "__iter__, in an order it may change every epoch and split among the workers, so a "
            "copy read ahead would not train as it does. Use --preload off."
        )
    if not hasattr(dataset, "__len__"):
        raise PreloadError(
            f"--preload ram: {name} has no len(), so speedlab cannot tell which samples to "
            "load ahead. Use --preload off."
        )


def preload_ram(dataset: Any) -> Preloaded:
    _check_numbered(dataset)
    base, indices = _base_and_indices(dataset)
    if not indices:
        return Preloaded(dataset)
    if ram_cache(base) == "loads":
        sample = [base.load(i) for i in indices[:_ESTIMATE_FROM]]
        _check_ram(
            sum(map(nbytes, sample)) / len(sample) * len(indices), f"{len(indices)} decoded samples"
        )
        items = dict(zip(indices, sample))
        items.update((i, base.load(i)) for i in indices[len(sample) :])
        cached = copy.copy(base)
        cached.load = _LoadCache(items)
        note = f"preload=ram decoded {len(items)} samples into memory; augmentation still runs every step."
        return Preloaded(_rewrap(dataset, cached), [note])
    sample = [dataset[i] for i in range(min(_ESTIMATE_FROM, len(dataset)))]
    _check_ram(sum(map(nbytes, sample)) / len(sample) * len(dataset), f"{len(dataset)} samples")
    items = sample + [dataset[i] for i in range(len(sample), len(dataset))]
    note = (
        f"preload=ram cached {len(items)} whole samples: {type(base).__name__} has no load/transform "
        "split, so any random augmentation is frozen (every epoch sees the same samples)."
    )
    return Preloaded(CachedItems(items), [note])


def preload_shm(dataset: Any) -> Preloaded:
    base, _ = _base_and_indices(dataset)
    files = getattr(base, "files", None)
    if files is None or not callable(getattr(base, "relocate", None)) or not hasattr(base, "root"):
        raise PreloadError(
            f"--preload shm: {type(base).__name__} does not say which files it reads (it needs "
            "`files`, `root` and `relocate(new_root)`, as speedlab.labs.ShapesDataset has). "
            "Use --preload ram."
        )
    root = Path(base.root)
    need = sum(Path(f).stat().st_size for f in files)
    if not SHM.is_dir():
        raise PreloadError("--preload shm: this system has no /dev/shm. Use --preload ram.")
    free = shutil.disk_usage(SHM).free
    if need > free:
        raise PreloadError(
            f"--preload shm: the {len(files)} files need {_gb(need)}, but /dev/shm has only "
            f"{_gb(free)} free. Use --preload ram, or a larger /dev/shm (docker --shm-size)."
        )
    # Each file is read the way training reads it (the dataset's opener: a slow disk stays
    # slow), so the preload phase costs what a real copy off that storage costs.
    opener = getattr(base, "opener", None) or functools.partial(open, mode="rb")
    target = Path(tempfile.mkdtemp(prefix="speedlab-", dir=SHM))
    try:
        for f in files:
            dest = target / Path(f).relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            with opener(f) as source, dest.open("wb") as copy_to:
                shutil.copyfileobj(source, copy_to)
        moved = copy.copy(base)
        moved.relocate(target)
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    note = (
        f"preload=shm copied {len(files)} files ({_gb(need)}) to /dev/shm, reading each from "
        "the dataset's storage as training does; decoding still runs every step."
    )
    return Preloaded(_rewrap(dataset, moved), [note], cleanup_dir=target)


def preload(mode: str, dataset: Any) -> Preloaded:
    # the samples a preload loads must not move the cell's shuffling (a RandomSampler draws
    # its seed from torch's generator)
    with own_random_state():
        if mode == "ram":
            return preload_ram(dataset)
        if mode == "shm":
            return preload_shm(dataset)
    return Preloaded(dataset)
