"""A steady step's time on an asynchronous device, split by what the device was doing."""

from __future__ import annotations

import math
from dataclasses import dataclass

from speedlab.results.table import fmt_ms


@dataclass(frozen=True)
class DeviceSplit:
    """A steady step's time on the device, in seconds, three ways: ``busy``, its work (its
    kernels and copies, as traced on one warm-up step); ``input``, idle for want of input
    (data_time on its timeline, the batch's copy included); ``launches``, idle waiting for the
    host's launches (the rest of batch_time: gaps between its kernels while the host was still
    queueing them)."""

    busy: float
    input: float
    launches: float

    @classmethod
    def of(cls, data_time: float, batch_time: float, busy: float | None) -> DeviceSplit | None:
        """The split of a step of ``data_time`` and ``batch_time`` whose work took ``busy``
        seconds; None where the work was not traced or no step was timed."""
        if busy is None or not (math.isfinite(batch_time) and math.isfinite(data_time)):
            return None
        busy = min(busy, batch_time)
        return cls(busy=busy, input=data_time, launches=batch_time - busy)

    @property
    def launch_share(self) -> float:
        """The part of batch_time the device sat waiting for the host's launches."""
        batch = self.busy + self.launches
        return self.launches / batch if batch > 0 else 0.0

    def text(self) -> str:
        return (
            f"busy {fmt_ms(self.busy)}, idle for input {fmt_ms(self.input)}, "
            f"idle for launches {fmt_ms(self.launches)}"
        )
