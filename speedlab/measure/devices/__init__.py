"""Device clocks: how each kind of device times a step, one module per device."""

from __future__ import annotations

from speedlab.measure.devices.cuda import CudaTimer


def device_timer(device: str) -> CudaTimer | None:
    """The clock that times a step's work on ``device`` (a ``torch.device.type``); None where
    the host's clock is the device's (the CPU)."""
    return CudaTimer() if device == "cuda" else None
