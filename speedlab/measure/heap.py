"""Full garbage collections during a fit, stamped on the host's clock.

A full collection walks every object of the process. In a notebook kernel with Lightning,
torch and IPython imported (about 370 thousand objects) one took 213 to 264 ms here: the length of
ten short steps. CPython runs one when the objects that survived the young collections have
grown by a quarter since the last, so what brings it on is the kernel's history (data loaded,
runs kept), not the run's knobs, and a run that meets one pays for the kernel's state. Young
collections are different: they scale with the step's own allocations and are part of its
steady cost, so only the oldest generation's are stamped.

``speedlab.measure.steps`` charges each collection to the step it ran in (``gc_time``), and
``speedlab.results.steady`` names such a step a pause by what it is, where a step's length alone
would not tell it from a slow step.
"""

from __future__ import annotations

import gc
import time
from typing import Any

FULL = len(gc.get_threshold()) - 1
"""The oldest generation: a collection of it is a collection of the whole heap."""


class FullCollections:
    """Stamps each full collection as ``(start, end)`` on ``time.perf_counter`` in ``spans``
    while started. CPython calls it at every collection's start and end (young ones too, a
    fraction of a microsecond each, a few times a run) in whichever thread collects."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float]] = []
        self._start = 0.0
        self._callback = self._seen  # one bound method, to find in gc.callbacks again

    def start(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def stop(self) -> None:
        """No more stamps; safe to repeat."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _seen(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != FULL:
            return
        now = time.perf_counter()
        if phase == "start":
            self._start = now
        elif self._start:  # not one that began before the stamps did
            self.spans.append((self._start, now))
            self._start = 0.0
