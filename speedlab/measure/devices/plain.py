"""A device speedlab knows nothing particular about: synchronous, named by its type."""

from __future__ import annotations

from speedlab.measure.devices.device import Device


class PlainDevice(Device):
    """A device of ``type_name`` (a ``torch.device.type``) timed by the host's clock, called
    ``name`` in the texts (its type, unless given).

    It is never chosen for a run (``is_available`` is False), so its answers on ``amp`` and
    ``--matmul`` are only what speedlab can say without knowing the device.

    Args:
        type_name: the device's ``torch.device.type`` (``"mps"``).
        name: what the texts call it; ``type_name`` unless given.

    Example::

        PlainDevice("mps", name="GPU").name  # "GPU"
    """

    def __init__(self, type_name: str, name: str | None = None) -> None:
        self.type = type_name
        self.name = type_name if name is None else name

    def is_available(self) -> bool:
        return False

    def amp(self) -> tuple[str, str]:
        return (
            "bf16-mixed",
            f"precision=amp ran as bf16-mixed on {self.name}: speedlab does not know this "
            "device's native precisions, and bf16 needs no loss scaling.",
        )

    def matmul(self, level: str) -> tuple[str, bool]:
        note = (
            f"matmul={level}: speedlab does not know what it does on {self.name}; the run's "
            "verdict says whether it changed the speed."
        )
        return note, True  # not known to change nothing
