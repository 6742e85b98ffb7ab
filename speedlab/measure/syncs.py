"""Host syncs measured on a GPU: which lines make the CPU wait for the GPU, and how often.

A synchronizing CUDA operation (``.item()``, ``.cpu()``, ``.tolist()``, ``torch.nonzero``, a
blocking copy to the host) stops the CPU until the GPU has finished all queued work; the GPU
then idles while the CPU prepares what comes next. ``SyncWatch`` turns on
``torch.cuda.set_sync_debug_mode("warn")`` around the forward/backward/optimizer span of a few
warm-up steps, which the figures leave out anyway, so the warnings' own cost touches no
measured step. torch then warns at every such operation, from the Python line that made it;
the watch counts those warnings per line and passes every other warning on to the user's
filters. The lint (``speedlab.lint``) reads the same patterns from the source; this is the
measured side, and it also sees syncs made inside libraries.
"""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from typing import Any

SYNC_MESSAGE = "synchronizing CUDA operation"
"""What torch's warning says at each synchronizing operation (c10's ``warn_or_error_on_sync``)."""
WATCH_STEPS = 3
"""Warm-up steps watched, from the second: the first step makes one-off syncs (the optimizer's
state, cuDNN's autotuning) that say nothing about the steps after it."""
_LIBRARY_DIRS = frozenset({"site-packages", "dist-packages"})


def in_library(path: str) -> bool:
    """Whether a source file belongs to an installed package (torch, Lightning, ...), not to
    the user's own code."""
    return not _LIBRARY_DIRS.isdisjoint(Path(path).parts)


def source_place(path: str, line: int) -> str:
    """``path:line``, an installed package's file from its package folder on
    (``torch/amp/grad_scaler.py:300``)."""
    parts = Path(path).parts
    start = max((i + 1 for i, part in enumerate(parts) if part in _LIBRARY_DIRS), default=0)
    return f"{Path(*parts[start:]) if start else path}:{line}"


class SyncWatch:
    """Counts synchronizing CUDA operations per source line over warm-up steps 1 to
    ``WATCH_STEPS`` (those below ``warmup``).

    ``enter(step)`` and ``exit()`` go around a step's forward/backward/optimizer span;
    ``exit`` restores the debug mode the process had, and is safe to call when nothing is
    watched (the probe calls it again when a fit ends, error or interrupt included).
    """

    def __init__(self, warmup: int) -> None:
        import torch

        self._cuda = torch.cuda
        self.steps = range(1, min(warmup, 1 + WATCH_STEPS))
        self.watched = 0
        self.counts: Counter[tuple[str, int]] = Counter()
        self._catcher: warnings.catch_warnings | None = None
        self._caught: list[warnings.WarningMessage] = []
        self._mode = 0

    def enter(self, step: int) -> None:
        if step not in self.steps or self._catcher is not None:
            return
        self._mode = self._cuda.get_sync_debug_mode()
        self._catcher = warnings.catch_warnings(record=True)
        self._caught = self._catcher.__enter__()
        warnings.simplefilter("always")
        self._cuda.set_sync_debug_mode("warn")

    def exit(self) -> None:
        catcher, self._catcher = self._catcher, None
        if catcher is None:
            return
        self._cuda.set_sync_debug_mode(self._mode)
        catcher.__exit__(None, None, None)
        self.watched += 1
        for caught in self._caught:
            if SYNC_MESSAGE in str(caught.message):
                self.counts[(caught.filename, caught.lineno)] += 1
            else:
                warnings.warn_explicit(
                    caught.message, caught.category, caught.filename, caught.lineno
                )
        self._caught = []

    def result(self) -> dict[str, Any]:
        """``{"steps": watched, "lines": [{"file", "line", "count"}, ...]}``, most first;
        empty when no step was watched."""
        if not self.watched:
            return {}
        lines = [
            {"file": file, "line": line, "count": count}
            for (file, line), count in self.counts.most_common()
        ]
        return {"steps": self.watched, "lines": lines}
