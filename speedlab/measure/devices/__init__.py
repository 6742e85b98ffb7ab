"""Device clocks: how each kind of device stamps a step's edges, one module per device."""

from __future__ import annotations

from speedlab.measure.devices.cuda import cuda_timeline
from speedlab.measure.devices.events import EventTimeline

ASYNC_DEVICES = {"cuda": cuda_timeline}
"""Devices that run queued work behind the host, and how to make each one's timeline."""


def device_timeline(device: str) -> EventTimeline | None:
    """The timeline of a step's edges on ``device`` (a ``torch.device.type``); None where the
    host's clock is the device's (the CPU)."""
    make = ASYNC_DEVICES.get(device)
    return make() if make is not None else None
