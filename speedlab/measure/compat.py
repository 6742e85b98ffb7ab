"""Which Lightning packages are installed: ``lightning.pytorch``, ``pytorch_lightning`` or both.

Users import either; speedlab must attach to whichever Trainer the cell builds, so the probe
subclasses every installed ``Callback`` and the interceptor patches every installed ``Trainer``.
And which of a trainer's per-step calls are Lightning's own, doing nothing the probe must keep
(``quiet_fetch``, ``batch_untouched``): there the probe stamps the clock in their place.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from types import ModuleType
from typing import Any

_PACKAGES = ("lightning.pytorch", "pytorch_lightning")


@cache
def lightning_packages() -> tuple[ModuleType, ...]:
    """The installed Lightning trainer packages, ``lightning.pytorch`` first."""
    found = []
    for name in _PACKAGES:
        top = name.split(".")[0]
        if importlib.util.find_spec(top) is None:
            continue
        found.append(importlib.import_module(name))
    if not found:
        raise ImportError("speedlab needs Lightning: pip install 'lightning>=2.2'")
    return tuple(found)


def callback_bases() -> tuple[type, ...]:
    return tuple(pkg.Callback for pkg in lightning_packages())


def trainer_classes() -> tuple[type, ...]:
    return tuple(pkg.Trainer for pkg in lightning_packages())


def is_lightning_module(obj: object) -> bool:
    return isinstance(obj, tuple(pkg.LightningModule for pkg in lightning_packages()))


def is_datamodule(obj: object) -> bool:
    return isinstance(obj, tuple(pkg.LightningDataModule for pkg in lightning_packages()))


def is_combined_loader(obj: object) -> bool:
    return isinstance(obj, tuple(pkg.utilities.CombinedLoader for pkg in lightning_packages()))


def _lightning_own(obj: Any, name: str, owner: str) -> bool:
    """Whether ``obj.name`` is the method of Lightning's class ``owner`` (a dotted path in its
    package), neither overridden nor wrapped."""
    method = getattr(getattr(obj, name, None), "__func__", None)
    for pkg in lightning_packages():
        cls: Any = pkg
        for part in owner.split("."):
            cls = getattr(cls, part)
        if method is getattr(cls, name):
            return True
    return False


def quiet_fetch(trainer: Any, edge: str) -> bool:
    """Whether the training loop's call at ``edge`` of each fetch (``_on_before_fetch`` or
    ``_on_after_fetch``) does nothing: Lightning's own method, starting or stopping the default
    profiler, whose ``start`` and ``stop`` do nothing."""
    return any(
        type(trainer.profiler) is pkg.profilers.PassThroughProfiler for pkg in lightning_packages()
    ) and _lightning_own(trainer.fit_loop.epoch_loop, edge, "loops._TrainingEpochLoop")


BATCH_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def batch_untouched(trainer: Any) -> bool:
    """Whether nothing but Lightning's bookkeeping happens to a batch between its fetch and its
    training: the precision's input conversion, the batch transfer hooks (the module's and any
    datamodule's) and the strategy's move are Lightning's own, which return a batch that is
    already on the device as it is."""
    module, data = trainer.lightning_module, trainer.datamodule
    return (
        _lightning_own(trainer.precision_plugin, "convert_input", "plugins.precision.Precision")
        and _lightning_own(trainer.strategy, "batch_to_device", "strategies.Strategy")
        and all(_lightning_own(module, hook, "LightningModule") for hook in BATCH_HOOKS)
        and (
            data is None
            or all(_lightning_own(data, hook, "LightningDataModule") for hook in BATCH_HOOKS)
        )
    )


def says_last_batch(fetcher: Any) -> bool:
    """Whether Lightning's data ``fetcher`` is ``done`` from the step that trains its loader's
    last batch on (the prefetching fetcher of a training loop that does not hand the step the
    loader's iterator), and not before: sized, it counts its loader's batches; unsized, it
    fetches ahead."""
    kinds = tuple(pkg.loops.fetchers._PrefetchDataFetcher for pkg in lightning_packages())
    return type(fetcher) in kinds


def feeds_iterator(fetcher: Any) -> bool:
    """Whether Lightning's data ``fetcher`` hands the training step the loader's iterator
    (``training_step(self, dataloader_iter)``), so that the step fetches its own batches."""
    kinds = tuple(pkg.loops.fetchers._DataLoaderIterDataFetcher for pkg in lightning_packages())
    return isinstance(fetcher, kinds)
