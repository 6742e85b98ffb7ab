"""The CUDA clock: a step's edges as CUDA events in the current stream (``events``)."""

from __future__ import annotations

from speedlab.measure.devices.events import EventTimeline


def cuda_timeline() -> EventTimeline:
    """The timeline of the current CUDA device: events with timing, one synchronize at the end."""
    import torch

    return EventTimeline(lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize)
