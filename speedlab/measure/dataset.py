"""What a training dataset gives the model: a fingerprint of a few of its samples and of where
they come from, so two runs can be shown to train on the same data.

``fingerprint(dataset)`` is a small JSON-able dict: the dataset's class and length, how its
files are opened (a slow-storage simulator such as the image lab's ``ThrottledOpener``, with
its latency and bandwidth), the image size, mode and JPEG quality of a few of its files, a hash
of those files' bytes, and the shape, dtype and a hash of a few samples as the model gets them
(decoded and transformed, random augmentation drawn from a fixed seed: torch's, Python's and
NumPy's). Knobs that only change
how the data travels (workers, pinned memory, prefetching, preloading) leave it unchanged.

It reads ``SAMPLES`` samples, at fixed indices spread over the dataset, and is meant to be
taken once the fit it describes has ended, so that its reads cannot change the run they
describe: ``speedlab.run.intercept`` does so where an assignment grades, and only there (a
profiled fit reads nothing after training). Nor do they change the next one: the random states
are put back as they were (``own_random_state``: the next run shuffles as it would have), and
the page cache
gains at most ``SAMPLES`` small files of a dataset that training reads anyway (a slow-storage
simulator sleeps whether or not a file is cached). The files are read directly for their
bytes (not through a throttle, which would only add its sleep); the samples go through the
dataset itself, and so through its storage: ``SAMPLES`` reads' latency.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import random
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

SAMPLES = 3
"""Samples read for a fingerprint: enough to see a changed image, cheap on slow storage."""

# libjpeg's luminance quantization table at quality 50 (natural order): the tables of every
# other quality are scaled from it, which lets the quality be read back from a file.
_JPEG_LUMA_50 = (
    *(16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55),
    *(14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62),
    *(18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92),
    *(49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99),
)


def fingerprint(dataset: Any) -> dict[str, Any]:
    """The fingerprint of ``dataset`` (see the module's docstring); the fields that cannot be
    read from it are left out. Wrappers with a ``dataset`` attribute (``Subset``) are looked
    through for the storage and the files; the samples are the wrapper's own."""
    base = dataset
    while hasattr(base, "dataset"):
        base = base.dataset
    out: dict[str, Any] = {"dataset": type(base).__qualname__}
    if hasattr(dataset, "__len__"):
        out["length"] = len(dataset)
    indices = _spread(out.get("length", 0))
    opener = getattr(base, "opener", None)
    if opener is not None:
        out["storage"] = describe_opener(opener)
    files = getattr(base, "files", None)
    if files is not None and len(files) == out.get("length"):
        out |= _files([Path(files[i]) for i in indices])
    if indices:
        out |= _samples(dataset, indices)
    return out


def describe_opener(opener: Any) -> str:
    """How files are opened, in one line: ``ThrottledOpener(bytes_per_s=inf, latency_s=0.008)``
    (a dataclass's fields, less the folder it applies to) or a function's name."""
    if dataclasses.is_dataclass(opener):
        fields = ", ".join(
            f"{f.name}={getattr(opener, f.name)!r}"
            for f in dataclasses.fields(opener)
            if f.name != "root"
        )
        return f"{type(opener).__qualname__}({fields})"
    return getattr(opener, "__qualname__", type(opener).__qualname__)


def _spread(length: int) -> list[int]:
    """``SAMPLES`` fixed indices spread over a dataset of ``length`` (fewer if it is smaller)."""
    return sorted({i * length // SAMPLES for i in range(min(SAMPLES, length))})


def _files(paths: list[Path]) -> dict[str, Any]:
    """Image size, mode and JPEG quality of the first file, a hash of all of their bytes."""
    try:
        contents = [path.read_bytes() for path in paths]
    except OSError:
        return {}
    out: dict[str, Any] = {"file_hash": _hash(contents)}
    try:
        from PIL import Image

        with Image.open(io.BytesIO(contents[0])) as image:
            out["image_size"] = "x".join(map(str, image.size))
            out["image_mode"] = image.mode
            tables = getattr(image, "quantization", None)
            if tables:
                out["jpeg_quality"] = jpeg_quality(tables[0])
    except (ImportError, OSError):  # not an image Pillow reads
        pass
    return out


def jpeg_quality(luma: Iterable[int]) -> int | None:
    """The libjpeg quality (1-100) that gives this luminance table, None for another encoder's."""
    table = list(luma)
    for quality in range(1, 101):
        scale = 5000 // quality if quality < 50 else 200 - 2 * quality
        if table == [min(255, max(1, (v * scale + 50) // 100)) for v in _JPEG_LUMA_50]:
            return quality
    return None


def _samples(dataset: Any, indices: list[int]) -> dict[str, Any]:
    """Shape and dtype of the first sample and a hash of all of them, augmentation seeded."""
    import torch

    if isinstance(dataset, torch.utils.data.IterableDataset):
        return {}
    try:
        with own_random_state(seed=0):
            samples = [dataset[i] for i in indices]
    except Exception as err:  # the user's dataset: its failure is not the fingerprint's
        return {"sample": f"unreadable ({type(err).__name__})"}
    return {"sample": _describe(samples[0]), "sample_hash": _hash(_bytes(s) for s in samples)}


@contextlib.contextmanager
def own_random_state(seed: int | None = None) -> Iterator[None]:
    """Leave torch's, Python's and NumPy's random states as they were when the block ends
    (a dataset's augmentation may draw from any of them); with ``seed``, all three seeded with
    it inside the block."""
    import torch

    numpy = sys.modules.get("numpy")
    saved = torch.get_rng_state(), random.getstate(), numpy and numpy.random.get_state()
    try:
        if seed is not None:
            torch.manual_seed(seed)
            random.seed(seed)
            if numpy is not None:
                numpy.random.seed(seed)
        yield
    finally:
        torch.set_rng_state(saved[0])
        random.setstate(saved[1])
        if numpy is not None:
            numpy.random.set_state(saved[2])


def _describe(sample: Any) -> str:
    """``float32[3, 64, 64], int``: the type and shape of each part of a sample."""
    if isinstance(sample, (tuple, list)):
        return ", ".join(_describe(part) for part in sample)
    shape = getattr(sample, "shape", None)
    if shape is not None:
        dtype = str(getattr(sample, "dtype", "")).removeprefix("torch.")
        return f"{dtype}{list(shape)}"
    return type(sample).__name__


def digest(sample: Any, per_tensor: int | None = None) -> str:
    """A short hash of a sample's (or a batch's) contents: equal contents, equal digests.
    ``per_tensor``: hash at most that many evenly spaced elements of each tensor, so that a
    large batch costs little (contents that differ only between them digest alike)."""
    return _hash([_bytes(sample, per_tensor)])


def _bytes(sample: Any, per_tensor: int | None = None) -> bytes:
    import torch

    if isinstance(sample, (tuple, list)):
        return b"".join(_bytes(part, per_tensor) for part in sample)
    if isinstance(sample, Mapping):  # keys and values: a tensor's repr would elide its middle
        return b"".join(
            repr(key).encode() + _bytes(value, per_tensor) for key, value in sample.items()
        )
    if hasattr(sample, "numpy"):  # a tensor, of any dtype
        flat = sample.detach().reshape(-1)
        if per_tensor is not None:
            flat = flat[:: max(1, -(-flat.numel() // per_tensor))]
        flat = flat.cpu().contiguous()
        return flat.view(torch.uint8).numpy().tobytes()
    if hasattr(sample, "tobytes"):  # a numpy array
        return sample.tobytes()
    return repr(sample).encode()


def _hash(parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:16]
