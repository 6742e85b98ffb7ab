"""Mixed precision that fits the cell: what ``precision=amp`` means on the device the cell's own
Trainer trains on, and the one line that explains an op autocast refuses.

``amp`` is resolved before the Trainer is built (it is one of its arguments), from the Trainer's
``accelerator`` argument: a cell that trains with ``accelerator="cpu"`` on a GPU machine gets the
CPU's mixed precision, not the GPU's.
"""

from __future__ import annotations

from typing import Any

from speedlab.measure.compat import lightning_packages
from speedlab.measure.devices import Device, default_device, device_for

LIGHTNING_ACCELERATORS: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu",),
    "cuda": ("cuda",),
    "mps": ("mps",),
    "tpu": ("xla",),
    "gpu": ("mps", "cuda"),
    "auto": (),
}
"""The torch device types each of Lightning's accelerator names may train on, in the order
Lightning picks them: ``tpu`` is XLA's, ``gpu`` whichever of MPS and CUDA is available, and
``auto`` names none (``default_device``, Lightning's own choice). The run layer's one map from
Lightning's names to speedlab's devices."""

AUTOCAST_REFUSES_BCE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast"
)
"""How the error starts that torch's CUDA autocast raises when a step calls binary cross
entropy (ATen's ``autocast_mode.cpp``; CPU autocast runs it in float32 instead)."""

BCE_UNDER_AUTOCAST = (
    "Mixed precision refused F.binary_cross_entropy / nn.BCELoss (torch's autocast calls them "
    "unsafe in reduced precision): have the model return logits, with no sigmoid before the "
    "loss, and use F.binary_cross_entropy_with_logits / nn.BCEWithLogitsLoss, which autocast "
    "runs safely."
)


def trainer_device(accelerator: Any = None) -> Device:
    """The device a Trainer built with ``accelerator`` trains on: one of Lightning's names, an
    ``Accelerator`` or None (``auto``; an ``Accelerator`` of a class Lightning has not
    registered is taken as ``auto`` too: its device cannot be told before it is set up).

    A name whose devices are not available here gets the default device: the Trainer refuses
    it itself, in Lightning's words. Another registered name (``hpu``) is taken as its device's
    type.
    """
    named = accelerator if isinstance(accelerator, str) else _registered_name(accelerator)
    name = named or "auto"
    types = LIGHTNING_ACCELERATORS.get(name)
    if types is None:
        return device_for(name)
    available = [device for t in types if (device := device_for(t)).is_available()]
    return available[0] if available else default_device()


def _registered_name(accelerator: Any) -> str | None:
    """The name Lightning registered the class of ``accelerator`` under (``CUDAAccelerator``:
    ``cuda``); None for None and for a class its registry does not hold."""
    for package in lightning_packages():
        for name, entry in package.accelerators.AcceleratorRegistry.items():
            if isinstance(accelerator, entry["accelerator"]):
                return name
    return None


def resolve_precision(requested: str, accelerator: Any = None) -> tuple[str, str | None]:
    """The Lightning precision ``requested`` runs as on a Trainer built with ``accelerator``,
    and the note saying why where that is not ``requested`` itself: ``amp`` is the best mixed
    precision that Trainer's device (``trainer_device``) runs natively."""
    if requested != "amp":
        return requested, None
    return trainer_device(accelerator).amp()


def autocast_refusal(error: str) -> str | None:
    """The one line that explains a run's ``error`` (its text, a rank's traceback included)
    where autocast refused an op in it; None for any other error."""
    return BCE_UNDER_AUTOCAST if AUTOCAST_REFUSES_BCE in error else None
