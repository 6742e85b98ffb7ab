"""What decoding the same JPEG files costs with Pillow and with faster decoders, at full size
and at reduced scale: lesson 03 teaches decoder choice from these figures, measured on the
learner's own machine rather than taken from a guide.

Every decoder turns a file's bytes into the same (size, size, 3) uint8 pixels, so the timings
compare like with like. A JPEG decoder can also decode at 1/2, 1/4 or 1/8 scale, skipping most
of the work, when the images are stored larger than the model trains on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import numpy as np
from PIL import Image

Decode = Callable[[bytes, int], np.ndarray]

NEEDS = {
    "Pillow": "nothing more: speedlab depends on it. pillow-simd, a faster fork, replaces "
    "Pillow and must be built from source (a C compiler and the libjpeg headers)",
    "simplejpeg": "pip install simplejpeg (or speedlab[decoders]): a wheel from PyPI with "
    "libjpeg-turbo inside",
    "torchvision": "the torchvision release built for this exact torch, from the same index as "
    "torch (each torchvision release pins one torch release)",
}
"""What each decoder needs, in one phrase: what the lesson prints beside its figure."""


def _resized(pixels: np.ndarray, size: int) -> np.ndarray:
    if pixels.shape[:2] == (size, size):
        return pixels
    return np.asarray(Image.fromarray(pixels).resize((size, size), Image.BILINEAR))


def pillow_full(data: bytes, size: int) -> np.ndarray:
    """Pillow, as the image lab decodes: the whole image, then resized to ``size``."""
    with Image.open(BytesIO(data)) as image:
        return _resized(np.asarray(image.convert("RGB")), size)


def pillow_draft(data: bytes, size: int) -> np.ndarray:
    """Pillow with ``Image.draft``: the decoder itself scales down to at least ``size``."""
    with Image.open(BytesIO(data)) as image:
        image.draft("RGB", (size, size))
        return _resized(np.asarray(image.convert("RGB")), size)


def simplejpeg_full(data: bytes, size: int) -> np.ndarray:
    """simplejpeg (libjpeg-turbo): the whole image, then resized to ``size``."""
    import simplejpeg

    return _resized(simplejpeg.decode_jpeg(data, colorspace="RGB"), size)


def simplejpeg_scaled(data: bytes, size: int) -> np.ndarray:
    """simplejpeg decoding at the smallest scale that still gives ``size`` pixels."""
    import simplejpeg

    pixels = simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=size, min_width=size)
    return _resized(pixels, size)


def torchvision_full(data: bytes, size: int) -> np.ndarray:
    """torchvision.io.decode_jpeg: the whole image, then resized to ``size``."""
    import torch
    from torchvision.io import decode_jpeg

    pixels = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    return _resized(pixels.permute(1, 2, 0).numpy(), size)


DECODERS: dict[str, tuple[str, Decode]] = {
    "Pillow, full decode then resize": ("Pillow", pillow_full),
    "Pillow, Image.draft (decode at reduced scale)": ("Pillow", pillow_draft),
    "simplejpeg, full decode then resize": ("simplejpeg", simplejpeg_full),
    "simplejpeg, decode at reduced scale": ("simplejpeg", simplejpeg_scaled),
    "torchvision.io.decode_jpeg, full decode then resize": ("torchvision", torchvision_full),
}
"""Each way of decoding: its name, the package it needs and the function."""


@dataclass(frozen=True)
class DecoderTiming:
    """One decoder's cost per image, or why it could not run here."""

    name: str
    package: str
    ms_per_image: float | None
    missing: str | None = None

    def __str__(self) -> str:
        if self.ms_per_image is None:
            return f"{self.name}: not measured here ({self.missing})"
        return f"{self.name}: {self.ms_per_image:.3f} ms per image"


def _usable(package: str, decode: Decode, sample: bytes, size: int) -> str | None:
    """None when ``decode`` runs here; else why not, in a few words."""
    try:
        decode(sample, size)
    except ImportError as error:
        return f"{package} is not installed" if error.name == package else f"import failed: {error}"
    except Exception as error:  # a broken install: say so instead of failing the lesson
        return f"{package} failed here: {type(error).__name__}: {error}"
    return None


def decoder_timings(files: Sequence[Path], size: int, *, rounds: int = 3) -> list[DecoderTiming]:
    """The cost per image of decoding ``files`` to (size, size) RGB pixels with each decoder.

    The files are read into memory first, so only decoding is timed. The decoders take turns
    in each of ``rounds`` rounds, and each keeps its fastest round: other work on the machine
    then slows every decoder alike, and least.
    """
    blobs = [Path(f).read_bytes() for f in files]
    missing = {name: _usable(pkg, fn, blobs[0], size) for name, (pkg, fn) in DECODERS.items()}
    best: dict[str, float] = {}
    for _ in range(rounds):
        for name, (_, decode) in DECODERS.items():
            if missing[name] is None:
                start = time.perf_counter()
                for blob in blobs:
                    decode(blob, size)
                took = time.perf_counter() - start
                best[name] = min(best.get(name, took), took)
    return [
        DecoderTiming(
            name, pkg, best[name] / len(blobs) * 1e3 if name in best else None, missing[name]
        )
        for name, (pkg, _) in DECODERS.items()
    ]
