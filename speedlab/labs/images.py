"""Image lab: a synthetic shapes dataset stored as real JPEG files, and a small CNN.

The files are real so that the lab has a real input pipeline: opening files, decoding JPEG and
augmenting on the CPU are what DataLoader workers, preloading and slow storage change.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch import nn
from torch.utils.data import Dataset
from typing_extensions import override

from speedlab.labs._base import Classifier, LabDataModule
from speedlab.labs.slow_storage import ThrottledOpener

MANIFEST = "manifest.json"
_FORMAT_VERSION = 1  # bump when the drawing changes, so cached datasets are redrawn
_MEAN, _STD = 0.5, 0.25

_Draw = Callable[[ImageDraw.ImageDraw, float, float, float, tuple[int, ...]], None]


def _circle(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, ...]):
    draw.ellipse([x - r, y - r, x + r, y + r], fill=fill)


def _square(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, ...]):
    s = 0.85 * r
    draw.rectangle([x - s, y - s, x + s, y + s], fill=fill)


def _triangle(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, ...]):
    draw.polygon([(x, y - r), (x + 0.87 * r, y + r / 2), (x - 0.87 * r, y + r / 2)], fill=fill)


def _cross(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, ...]):
    w = r / 3
    draw.rectangle([x - r, y - w, x + r, y + w], fill=fill)
    draw.rectangle([x - w, y - r, x + w, y + r], fill=fill)


def _diamond(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, ...]):
    draw.polygon([(x, y - r), (x + r, y), (x, y + r), (x - r, y)], fill=fill)


def _ring(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, ...]):
    draw.ellipse([x - r, y - r, x + r, y + r], outline=fill, width=max(2, round(r / 3)))


SHAPES: dict[str, _Draw] = {
    "circle": _circle,
    "square": _square,
    "triangle": _triangle,
    "cross": _cross,
    "diamond": _diamond,
    "ring": _ring,
}


def default_cache_dir() -> Path:
    """Where generated datasets are kept: ``$SPEEDLAB_CACHE``, else ``~/.cache/speedlab``."""
    env = os.environ.get("SPEEDLAB_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "speedlab"


def make_shapes(
    root: str | Path | None = None,
    *,
    n: int = 2000,
    size: int = 64,
    quality: int = 85,
    classes: int = 4,
    seed: int = 0,
) -> Path:
    """Write (once) a shapes classification dataset as JPEG files and return its folder.

    Each image is one shape (``circle``, ``square``, ``triangle``, ``cross``, ... one per class)
    of random position, size and colour on a noisy background of another random colour. The
    layout is ``<folder>/<class>/<index:05d>.jpg`` plus ``manifest.json``; image ``i`` has class
    ``i % classes``. The same parameters always give the same bytes.

    The folder is named from the parameters (``shapes-n2000-s64-q85-c4-seed0``), under
    ``root``, or under ``default_cache_dir()`` when ``root`` is None. A folder with a matching
    manifest is reused as it is. Generation writes into a hidden sibling folder, the manifest
    last, then renames it into place, so an interrupted run never looks finished; a folder
    without a valid manifest is deleted and drawn again.

    Args:
        root: parent folder of the dataset folder; None for the cache.
        n: number of images (at least ``classes``).
        size: width and height in pixels (16 or more).
        quality: JPEG quality, 1 to 95.
        classes: number of shapes, 2 to 6.
        seed: random seed.
    """
    limits = {"n": (classes, None), "size": (16, None), "quality": (1, 95), "classes": (2, 6)}
    params = {"n": n, "size": size, "quality": quality, "classes": classes, "seed": seed}
    for key, (low, high) in limits.items():
        if params[key] < low or (high is not None and params[key] > high):
            allowed = f"{low} to {high}" if high is not None else f"at least {low}"
            raise ValueError(
                f"make_shapes({key}={params[key]!r}) is not valid. Expected {allowed}."
            )
    parent = default_cache_dir() if root is None else Path(root).expanduser()
    target = parent / f"shapes-n{n}-s{size}-q{quality}-c{classes}-seed{seed}"
    if _is_complete(target, params):
        return target
    shutil.rmtree(target, ignore_errors=True)
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        _write_shapes(partial, params)
        partial.rename(target)
    except OSError:
        if not _is_complete(target, params):  # else another process finished it first
            raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def read_manifest(folder: Path) -> dict:
    """The manifest of a finished dataset folder; FileNotFoundError if it is not finished."""
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError) as error:
        raise FileNotFoundError(
            f"{folder} holds no finished shapes dataset; make it with make_shapes()."
        ) from error


def _is_complete(folder: Path, params: dict) -> bool:
    try:
        manifest = read_manifest(folder)
    except FileNotFoundError:
        return False
    return manifest.get("version") == _FORMAT_VERSION and manifest.get("params") == params


def _write_shapes(folder: Path, params: dict) -> None:
    names = list(SHAPES)[: params["classes"]]
    for name in names:
        (folder / name).mkdir()
    for i in range(params["n"]):
        name = names[i % len(names)]
        image = _draw(np.random.default_rng([params["seed"], i]), SHAPES[name], params["size"])
        image.save(folder / name / f"{i:05d}.jpg", format="JPEG", quality=params["quality"])
    counts = {name: len(range(k, params["n"], len(names))) for k, name in enumerate(names)}
    manifest = {"version": _FORMAT_VERSION, "params": params, "classes": names, "counts": counts}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))


def _draw(rng: np.random.Generator, shape: _Draw, size: int) -> Image.Image:
    background = rng.integers(0, 256, 3)
    # Each channel differs from the background by at least 96, so the shape always stands out.
    colour = tuple(int(c) for c in (background + rng.integers(96, 161, 3)) % 256)
    pixels = background + rng.normal(0.0, 24.0, (size, size, 3))
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))
    r = rng.uniform(0.15, 0.3) * size
    x, y = rng.uniform(r, size - r, 2)
    shape(ImageDraw.Draw(image), x, y, r, colour)
    return image


def open_binary(path: Path) -> BinaryIO:
    """The default ``ShapesDataset.opener``: open a file for binary reading."""
    return open(path, "rb")


class ShapesDataset(Dataset):
    """The images of a ``make_shapes`` folder, decoded and augmented on the CPU.

    Decoding (``load``) and augmentation (``transform``) are separate steps so that each can
    be timed, cached or moved on its own. A DataLoader fetches whole batches through
    ``__getitems__``, which augments them together (``transform_batch``: the same result per
    image, at a fraction of the calls). ``files`` lists the JPEG paths in index order;
    ``relocate`` points them at a copy of the folder, and ``opener`` (a picklable callable
    taking a path, returning a binary file) may be replaced, e.g. to throttle reads.

    Args:
        root: a folder made by ``make_shapes``.
        train: the training part (the first ``1 - val_fraction`` of the indices) or else the
            validation part (the rest).
        augment: random flip, shift by up to 1/16 of the size and brightness jitter.
        val_fraction: share of the images kept for validation.

    Example::

        data = ShapesDataset(make_shapes(n=200), train=False, augment=False)
        x, y = data[0]  # x: float tensor (3, 64, 64), y: int
    """

    def __init__(
        self, root: Path, train: bool = True, augment: bool = True, val_fraction: float = 0.1
    ) -> None:
        if not 0.0 <= val_fraction < 1.0:
            raise ValueError(
                f"ShapesDataset(val_fraction={val_fraction!r}) is not valid. Expected 0 <= x < 1."
            )
        self.root = Path(root)
        manifest = read_manifest(self.root)
        self.classes: list[str] = manifest["classes"]
        n = manifest["params"]["n"]
        cut = n - round(n * val_fraction)
        found = sorted(
            (int(path.stem), label, path)
            for label, name in enumerate(self.classes)
            for path in (self.root / name).glob("*.jpg")
        )
        kept = [(path, label) for index, label, path in found if (index < cut) == train]
        self.files: list[Path] = [path for path, _ in kept]
        self.labels: list[int] = [label for _, label in kept]
        self.augment = augment
        self.opener: Callable[[Path], BinaryIO] = open_binary

    def __len__(self) -> int:
        return len(self.files)

    @override
    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.transform(self.load(i)), self.label(i)

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, int]]:
        """The samples at ``indices``, augmented together (a DataLoader fetches batches so)."""
        batch = self.transform_batch(np.stack([self.load(i) for i in indices]))
        return list(zip(batch.unbind(0), map(self.label, indices), strict=True))

    def load(self, i: int) -> np.ndarray:
        """Open and decode image ``i``: its RGB pixels as an (H, W, 3) uint8 array."""
        with self.opener(self.files[i]) as file, Image.open(file, formats=["JPEG"]) as image:
            return np.array(image.convert("RGB"))

    def label(self, i: int) -> int:
        """The class index of image ``i``."""
        return self.labels[i]

    def transform(self, pixels: np.ndarray) -> torch.Tensor:
        """Float tensor (3, H, W) of (H, W, 3) 8-bit pixels, normalised; randomly augmented
        when ``augment`` is set."""
        return self.transform_batch(pixels[None])[0]

    def transform_batch(self, pixels: np.ndarray) -> torch.Tensor:
        """``transform`` of each of (B, H, W, 3) 8-bit pixels, each with its own random draws:
        a float tensor (B, 3, H, W).

        The whole batch goes through a handful of torch calls: done image by image, the calls
        would cost several times the arithmetic. The rows to read are whole runs of memory
        (one ``index_select``); within them, one gather with an index shared by every row of
        an image picks the columns, already split by channel.
        """
        x = torch.from_numpy(np.ascontiguousarray(pixels))
        n, height, width, _ = x.shape
        if not self.augment:
            x = x.permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
            return x.mul_(1 / (255 * _STD)).sub_(_MEAN / _STD)
        rows, cols, brightness = _augment(n, height, width)
        rows = (rows + torch.arange(n)[:, None] * height).view(-1)
        x = x.view(n * height, width * 3).index_select(0, rows).view(n, height, width * 3)
        index = (cols[:, None, :] * 3 + _CHANNELS).view(n, 1, 3 * width)
        x = x.gather(2, index.expand(n, height, 3 * width)).view(n, height, 3, width)
        scale = (brightness / (255 * _STD)).view(n, 1, 1, 1)
        out = torch.empty(n, 3, height, width)
        # min(level * brightness / 255, 1) normalised; the scaled level is never below 0.
        torch.mul(x.permute(0, 2, 1, 3), scale, out=out)
        return out.sub_(_MEAN / _STD).clamp_(max=(1 - _MEAN) / _STD)

    def relocate(self, new_root: Path) -> None:
        """Point every file at the same relative path under ``new_root`` (e.g. a RAM copy)."""
        new_root = Path(new_root)
        self.files = [new_root / path.relative_to(self.root) for path in self.files]
        self.root = new_root


_CHANNELS = torch.arange(3).view(1, 3, 1)


def _augment(n: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each of ``n`` images, a random flip and a shift by up to 1/16 of the size (edges
    repeated), as the rows (n, H) and columns (n, W) to read, and a brightness factor in
    [0.75, 1.25] (n,)."""
    # torch's generator, not numpy's: DataLoader seeds it differently in every worker. The
    # arithmetic on these few numbers is numpy's, which costs a fraction of torch's per call.
    flip, shift_y, shift_x, brightness = torch.rand(n, 4).numpy().T
    pad = max(1, width // 16)
    rows = _edge_index(height, pad)[(shift_y * (2 * pad + 1)).astype(np.int64)]
    cols = _edge_index(width, pad)[(shift_x * (2 * pad + 1)).astype(np.int64)]
    cols = np.where((flip < 0.5)[:, None], cols[:, ::-1], cols)
    return torch.from_numpy(rows), torch.from_numpy(cols), torch.from_numpy(0.75 + 0.5 * brightness)


@functools.cache
def _edge_index(n: int, pad: int) -> np.ndarray:
    """Row k (0 .. 2 * pad) holds the n indices of a shift by k - pad with the edges repeated:
    k - pad .. k - pad + n - 1, clipped to 0 .. n - 1."""
    starts = np.arange(2 * pad + 1)[:, None] - pad
    return np.clip(starts + np.arange(n), 0, n - 1)


class ShapesDataModule(LabDataModule):
    """Shapes images from ``make_shapes`` (generated once, cached), 90% train and 10% val.

    Args:
        root: parent folder of the dataset folder; None for ``default_cache_dir()``.
        n, size, quality, classes, seed: passed to ``make_shapes``.
        batch_size, num_workers, pin_memory, persistent_workers: passed to the DataLoaders.
        throttle: read the dataset folder through this ``ThrottledOpener`` (slow storage);
            None reads at full speed.

    Example::

        model, data = image_lab()
        pl.Trainer(max_steps=150).fit(model, data)
    """

    def __init__(
        self,
        root: str | Path | None = None,
        *,
        n: int = 2000,
        size: int = 64,
        quality: int = 85,
        classes: int = 4,
        batch_size: int = 32,
        num_workers: int = 0,
        pin_memory: bool = False,
        persistent_workers: bool = False,
        seed: int = 0,
        throttle: ThrottledOpener | None = None,
    ) -> None:
        super().__init__(batch_size, num_workers, pin_memory, persistent_workers)
        self.save_hyperparameters()
        self.root = root
        self.shapes = {"n": n, "size": size, "quality": quality, "classes": classes, "seed": seed}
        self.classes = classes
        self.throttle = throttle

    @override
    def prepare_data(self) -> None:
        make_shapes(self.root, **self.shapes)

    @override
    def setup(self, stage: str) -> None:
        # make_shapes again: instant when cached, and setup also works without prepare_data.
        folder = make_shapes(self.root, **self.shapes)
        self.train_set = ShapesDataset(folder, train=True, augment=True)
        self.val_set = ShapesDataset(folder, train=False, augment=False)
        if self.throttle is not None:
            self.train_set.opener = self.val_set.opener = self.throttle.within(folder)


def _block(channels_in: int, channels_out: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(channels_out),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
    )


class ConvNet(Classifier):
    """Small CNN for the shapes images: three conv blocks (16-32-64), global pool, linear.

    The first convolution has stride 2, which keeps a step cheap enough for a CPU workshop.
    The global pool is a max pool: it asks "is this shape anywhere?", where an average would
    dilute the one shape with the background; it learns several times faster.

    Args:
        classes: number of classes.
        lr: Adam learning rate.
    """

    def __init__(self, classes: int = 4, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(
            _block(3, 16, stride=2),
            _block(16, 32),
            _block(32, 64),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
            nn.Linear(64, classes),
        )


def image_lab(*, lr: float = 3e-3, **data_kw) -> tuple[ConvNet, ShapesDataModule]:
    """A ``ConvNet`` and a ``ShapesDataModule(**data_kw)`` that fit together.

    The loss falls clearly within 100-200 steps at the defaults.
    """
    data = ShapesDataModule(**data_kw)
    return ConvNet(classes=data.classes, lr=lr), data
