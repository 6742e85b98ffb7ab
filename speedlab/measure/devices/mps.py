"""An Apple GPU through torch's MPS backend: asynchronous, timed by MPS events on the same
timeline as a CUDA GPU (``events``); what amp and ``--matmul`` mean there.

Written from torch's MPS API and tested with fakes of it: it has not run on Apple hardware.
torch is imported only when asked; nothing here touches CUDA.
"""

from __future__ import annotations

import os

from speedlab.measure.devices.device import Device
from speedlab.measure.devices.events import EventTimeline
from speedlab.measure.machine import apple_silicon, imported_torch

AUTOCAST_TORCH = {"fp16": "2.5", "bf16": "2.6"}
"""The torch release from which its autocast on MPS takes each dtype."""
BF16_MACOS = (14, 0)
"""The macOS from which torch's autocast on MPS takes bfloat16 (before it, only float16)."""


class MpsDevice(Device):
    """The Apple GPU of this Mac, called the GPU in the doctor's texts as a CUDA GPU is. Its
    work is queued behind the host, so a step's edges are read from MPS events.

    Example::

        MpsDevice().timeline()  # an EventTimeline over torch.mps.event.Event
    """

    type = "mps"
    name = "GPU"
    asynchronous = True
    pins_memory = False  # unified memory; torch's DataLoader turns pin_memory off on MPS

    def is_available(self) -> bool:
        """Where Lightning's ``accelerator="auto"`` would pick it: torch's MPS backend works
        here, on Apple silicon, and ``DISABLE_MPS=1`` is not set."""
        if os.environ.get("DISABLE_MPS", "0") == "1" or not apple_silicon():
            return False
        import torch

        return torch.backends.mps.is_available()

    def timeline(self, warmup: int) -> EventTimeline:
        """MPS events with timing (``record``, ``query``, ``elapsed_time`` in milliseconds, as
        CUDA's), one ``torch.mps.synchronize`` at the end."""
        import torch

        return EventTimeline(
            lambda: torch.mps.event.Event(enable_timing=True), torch.mps.synchronize
        )

    def memory_reserved(self) -> int | None:
        """Bytes Metal's driver holds for this process (``torch.mps.driver_allocated_memory``:
        torch's cache included), only where the user's code has imported torch and a run may
        train on the GPU."""
        torch = imported_torch()
        if torch is None or not self.is_available():
            return None
        return int(torch.mps.driver_allocated_memory())

    def amp(self) -> tuple[str, str]:
        """What torch's autocast on MPS takes: bf16 from torch 2.6 on macOS 14 or newer (no
        loss scaling needed), else fp16 from torch 2.5; with an older torch, no mixed precision
        at all."""
        import torch
        from torch.torch_version import TorchVersion

        version = TorchVersion(torch.__version__)
        if version < AUTOCAST_TORCH["fp16"]:
            return "32-true", (
                f"precision=amp ran as 32-true on the Apple GPU: torch {version} has no autocast "
                f"on MPS (it came in torch {AUTOCAST_TORCH['fp16']})."
            )
        if version >= AUTOCAST_TORCH["bf16"] and torch.backends.mps.is_macos_or_newer(*BF16_MACOS):
            return "bf16-mixed", (
                "precision=amp ran as bf16-mixed on the Apple GPU: MPS autocast takes bf16 here, "
                "and bf16 needs no loss scaling."
            )
        return "16-mixed", (
            "precision=amp ran as 16-mixed on the Apple GPU: MPS autocast takes bf16 only from "
            f"torch {AUTOCAST_TORCH['bf16']} on macOS {BF16_MACOS[0]}, so fp16 (with loss "
            "scaling) here."
        )

    def matmul(self, level: str) -> tuple[str, bool]:
        """``highest`` is full float32. The other levels are not known to change MPS's float32
        matmuls (torch documents them for cuBLAS and oneDNN), nor known not to: never called
        inert here."""
        if level == "highest":
            return f"matmul={level}: float32 matmuls run in full float32 on the Apple GPU.", False
        note = (
            f"matmul={level} is not known to change float32 matmuls on the Apple GPU; the "
            "run's verdict says whether the speed changed."
        )
        return note, True  # not known to change nothing
