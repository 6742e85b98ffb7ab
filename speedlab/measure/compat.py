"""Which Lightning packages are installed: ``lightning.pytorch``, ``pytorch_lightning`` or both.

Users import either; speedlab must attach to whichever Trainer the cell builds, so the probe
subclasses every installed ``Callback`` and the interceptor patches every installed ``Trainer``.
"""

from __future__ import annotations

import importlib
import importlib.util
from functools import cache
from types import ModuleType

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
