"""What differs by device, one module per device behind one interface (``Device``), and the
registry that gives each ``torch.device.type`` its device.

The probe, the run and the texts ask ``device_for(run.device)`` (or ``default_device()`` before a
run has a device), never ``if device == "cuda"``. A new device (an NPU) is a module here with a
``Device`` subclass, and its entry in ``DEVICES``, as XLA's is.
"""

from __future__ import annotations

from collections.abc import Callable

from speedlab.measure.devices.cpu import CpuDevice
from speedlab.measure.devices.cuda import CudaDevice
from speedlab.measure.devices.device import Device
from speedlab.measure.devices.mps import MpsDevice
from speedlab.measure.devices.plain import PlainDevice
from speedlab.measure.devices.xla import XlaDevice

__all__ = [
    "DEVICES",
    "CpuDevice",
    "CudaDevice",
    "Device",
    "MpsDevice",
    "PlainDevice",
    "XlaDevice",
    "available_devices",
    "default_device",
    "device_for",
    "memory_reserved",
]

DEVICES: dict[str, Callable[[], Device]] = {
    "xla": XlaDevice,
    "mps": MpsDevice,
    "cuda": CudaDevice,
    "cpu": CpuDevice,
}
"""Each ``torch.device.type`` speedlab knows, and how to make its device, in the order
Lightning's ``accelerator="auto"`` prefers them (the CPU last)."""


def device_for(type_name: str) -> Device:
    """The device of ``type_name`` (a ``torch.device.type``, as ``RunResult.device``); a
    synchronous ``PlainDevice`` named by its type where speedlab knows no such device."""
    make = DEVICES.get(type_name)
    return make() if make is not None else PlainDevice(type_name)


def available_devices() -> list[Device]:
    """The devices a run in this process may train on, the one ``accelerator="auto"`` picks
    first. Asking may initialise a device's driver, as Lightning's choice does: ask only where
    a run is being set up."""
    return [device for make in DEVICES.values() if (device := make()).is_available()]


def default_device() -> Device:
    """The device a run here trains on unless its Trainer says otherwise."""
    return available_devices()[0]


def memory_reserved() -> int | None:
    """Bytes the device allocators of this process hold, summed over the known devices; None
    where none tells (no device in use yet, or torch not imported). Initialises nothing."""
    held = [n for make in DEVICES.values() if (n := make().memory_reserved()) is not None]
    return sum(held) if held else None
