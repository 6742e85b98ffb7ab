"""What the warm-up steps watch, which no figure counts: the host's syncs of a few
(``speedlab.measure.syncs``), one step's FLOPs (``speedlab.measure.flops``) and the device's
own trace of its work in one (``speedlab.measure.devices.busy``), each where the device has it."""

from __future__ import annotations

from typing import Any

from speedlab.measure.devices.busy import BusyWatch
from speedlab.measure.devices.device import Device
from speedlab.measure.flops import FlopWatch
from speedlab.measure.syncs import SyncWatch


class WarmupWatches:
    """The watches of a fit on ``device`` with ``warmup`` steps, FLOPs counted at step
    ``counted`` (None: not counted); none before the fit starts."""

    def __init__(
        self, device: Device | None = None, warmup: int = 0, counted: int | None = None
    ) -> None:
        self.syncs: SyncWatch | None = device.sync_watch(warmup) if device else None
        self.flops = FlopWatch(counted)
        self.busy: BusyWatch | None = device.busy_watch(warmup) if device else None
        # in this order: the device's trace synchronizes it, which the sync watch would count
        watches = (self.syncs, self.flops, self.busy)
        self.each: tuple[Any, ...] = tuple(w for w in watches if w is not None)

    def enter(self, step: int) -> None:
        """Warm-up step ``step``'s training batch starts: each watch that watches it begins."""
        for watch in self.each:
            watch.enter(step)

    def exit(self) -> None:
        """The training batch ended, or was cut short: each watch stops (safe to repeat)."""
        for watch in self.each:
            watch.exit()

    def close(self) -> None:
        """The fit ended: each watch stops, and what the device's trace set is put back."""
        try:
            self.exit()
        finally:
            if self.busy is not None:
                self.busy.close()

    def results(self) -> dict[str, dict[str, Any]]:
        """A run's ``host_syncs``, ``flops`` and ``device_busy``."""
        return {
            "host_syncs": self.syncs.result() if self.syncs is not None else {},
            "flops": self.flops.result(),
            "device_busy": self.busy.result() if self.busy is not None else {},
        }
