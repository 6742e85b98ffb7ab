"""Bundled labs: datasets and models made on the spot, to profile and speed up.

- Image lab (``image_lab``): ``make_shapes`` writes a synthetic shapes dataset as real JPEG
  files (generated once, cached under ``default_cache_dir()``); ``ShapesDataModule`` decodes and
  augments them on the CPU for a small ``ConvNet``. Input-pipeline lessons: workers, pinned
  memory, preloading, slow storage (``image_lab(throttle=ThrottledOpener(...))``).
- Tabular lab (``tabular_lab``): generated rows in memory and a small ``MLP``. Each step is
  tiny, so per-step overhead dominates: batch-size lessons.
- Known-cost workload (``KnownCostDataset``, ``KnownCostModel``, ``known_cost_loader``): the
  time per sample and per step is set by the caller, so measurements can be checked.
- Decoders (``speedlab.labs.decoders``): the cost per image of decoding JPEG files with Pillow,
  simplejpeg and torchvision, at full size and at reduced scale (lesson 03).

Every lab really learns: its training loss falls clearly within 100-200 steps on a CPU.
``QUIET_TRAINER`` holds the Trainer arguments for a run that only trains.
Nothing is downloaded. This package imports torch and Lightning; ``speedlab`` loads it lazily.
"""

from speedlab.labs._base import QUIET_TRAINER
from speedlab.labs.images import (
    ConvNet,
    ShapesDataModule,
    ShapesDataset,
    default_cache_dir,
    image_lab,
    make_shapes,
)
from speedlab.labs.known_cost import KnownCostDataset, KnownCostModel, busy_wait, known_cost_loader
from speedlab.labs.slow_storage import ThrottledOpener
from speedlab.labs.tabular import MLP, TabularDataModule, make_tabular, tabular_lab

__all__ = [
    "MLP",
    "QUIET_TRAINER",
    "ConvNet",
    "KnownCostDataset",
    "KnownCostModel",
    "ShapesDataModule",
    "ShapesDataset",
    "TabularDataModule",
    "ThrottledOpener",
    "busy_wait",
    "default_cache_dir",
    "image_lab",
    "known_cost_loader",
    "make_shapes",
    "make_tabular",
    "tabular_lab",
]
