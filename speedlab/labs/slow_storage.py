"""Slow-storage simulator: read the image lab's files as if they sat on a slow disk or network.

On a fast machine the image lab is CPU-bound (JPEG decoding); teaching an I/O-bound pipeline
needs reads that wait. ``ThrottledOpener`` opens a file, then sleeps until the per-file
latency plus the transfer time at the given bandwidth has passed. Sleeping leaves the CPU
idle, as waiting on real storage does, so the doctor sees an I/O-bound load, and DataLoader
workers and ``--preload`` show their real effect on it.

Each reading process has its own bandwidth (like one connection to network storage):
parallel workers each read at ``bytes_per_s``, so workers hide latency as they do on real
remote storage.
"""

from __future__ import annotations

import io
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO


@dataclass(frozen=True)
class ThrottledOpener:
    """Opens files for binary reading, slowly: ``latency_s + size / bytes_per_s`` per file.

    Picklable (a plain frozen dataclass), so it works as ``ShapesDataset.opener`` inside
    DataLoader worker processes, whatever their start method.

    Args:
        bytes_per_s: bandwidth of one reader, bytes per second (``math.inf``: latency only).
        latency_s: seconds every file open waits before its first byte.
        root: only files under this folder are slow (the "slow disk"); files anywhere else,
            such as the copy ``--preload shm`` makes in /dev/shm, are read at full speed.
            ``None``: every file is slow.

    Example::

        model, data = image_lab(throttle=ThrottledOpener(bytes_per_s=2e6, latency_s=0.002))
    """

    bytes_per_s: float
    latency_s: float = 0.0
    root: Path | None = None

    def __post_init__(self) -> None:
        if not self.bytes_per_s > 0:
            raise ValueError(
                f"ThrottledOpener(bytes_per_s={self.bytes_per_s!r}) is not valid. "
                "Expected bytes per second > 0 (math.inf for no bandwidth limit)."
            )
        if not (self.latency_s >= 0 and math.isfinite(self.latency_s)):
            raise ValueError(
                f"ThrottledOpener(latency_s={self.latency_s!r}) is not valid. "
                "Expected seconds >= 0."
            )

    def within(self, root: str | Path) -> ThrottledOpener:
        """The same throttle, applied only to files under ``root``."""
        return replace(self, root=Path(root))

    def delay(self, nbytes: int) -> float:
        """Seconds a read of ``nbytes`` takes through this throttle."""
        return self.latency_s + nbytes / self.bytes_per_s

    def slows(self, path: str | Path) -> bool:
        """Whether reading ``path`` is throttled."""
        return self.root is None or Path(path).is_relative_to(self.root)

    def __call__(self, path: str | Path) -> BinaryIO:
        start = time.perf_counter()
        data = Path(path).read_bytes()
        if self.slows(path):
            remaining = self.delay(len(data)) - (time.perf_counter() - start)
            if remaining > 0:
                time.sleep(remaining)
        return io.BytesIO(data)
