"""What differs by device, behind one small interface: the probe, the run and the texts ask it.

A device is one module beside this one (``cpu.py``, ``cuda.py``) and one entry in the registry
(``speedlab.measure.devices.DEVICES``), as Lightning's accelerators are. Asking a device anything
must not initialise another: a CPU device never touches CUDA, whose initialisation breaks
fork-based DataLoader workers and ``ddp_notebook`` ranks.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from speedlab.measure.devices.busy import BusyWatch
    from speedlab.measure.devices.events import Timeline
    from speedlab.measure.syncs import SyncWatch


class Device(ABC):
    """One kind of device, as ``torch.device.type`` names it.

    The defaults are a synchronous device's: the host's clock is the device's, no sync watch,
    no memory figures, and pinned memory does nothing there.

    Attributes:
        type: its ``torch.device.type`` (``"cuda"``).
        name: what the texts call it (``"GPU"``).
        asynchronous: whether the host queues its work and runs ahead of it, so that the host's
            clock says when a step was queued, not when it was done (then ``timeline`` is not
            None).
        pins_memory: whether a DataLoader's ``pin_memory`` acts there (page-locked host memory
            speeds the batch's copy to it).
        counts_flops: whether the probe may count a step's FLOPs there (torch's
            ``FlopCounterMode`` runs the step's operations through Python) without changing
            what the step does.

    Example::

        device = device_for("cuda")
        device.name, device.asynchronous  # ("GPU", True)
    """

    type: str
    name: str
    asynchronous: bool = False
    pins_memory: bool = False
    host_memory: bool = False  # computes in the host's memory: a batch needs no copy to it
    counts_flops: bool = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}(type={self.type!r}, name={self.name!r})"

    @abstractmethod
    def is_available(self) -> bool:
        """Whether a run in this process may train on it."""

    def timeline(self, warmup: int) -> Timeline | None:
        """A new timeline of a step's edges on the device, for a run whose first ``warmup``
        steps are left out; None where the host's clock is the device's (a synchronous
        device)."""
        return None

    def sync_watch(self, warmup: int) -> SyncWatch | None:
        """A watch that counts the host syncs of a few warm-up steps (of ``warmup``); None
        where the device has no way to report them."""
        return None

    def busy_watch(self, warmup: int) -> BusyWatch | None:
        """A watch that traces how long the device worked in the last of ``warmup`` steps (its
        own record of its kernels and copies); None where it keeps none, or without warm-up."""
        return None

    def memory_reserved(self) -> int | None:
        """Bytes its allocator holds in this process; None where unknown or where finding out
        would initialise it."""
        return None

    def math(self) -> dict[str, bool | None]:
        """What its reduced-precision math can do, as facts a run records where it trained
        (``RunResult.workload["math"]``), so the doctor's advice is for that machine; empty
        where speedlab knows none."""
        return {}

    def peak_flops(self, precision: str, matmul: str) -> tuple[float | None, str]:
        """The most FLOP/s it can do in a Trainer's ``precision`` with float32 matmuls at
        ``matmul`` (``torch.get_float32_matmul_precision()`` during the run), and where the
        figure comes from, in words; None (with the reason) where speedlab does not know it,
        rather than a guess."""
        return None, f"speedlab knows no peak for a {self.name}"

    def refusal(self, knob: str, value: Any) -> str | None:
        """Why ``knob`` at ``value`` cannot act on a fit on this device, in one line naming the
        option and what to do; None where it can (or is not asked for)."""
        return None

    @abstractmethod
    def amp(self) -> tuple[str, str]:
        """The mixed precision ``precision=amp`` runs as there (a Lightning ``precision``), and
        the note that says why."""

    @abstractmethod
    def matmul(self, level: str) -> tuple[str, bool]:
        """The note on what ``--matmul level`` does there, and whether it changes float32
        matmuls' results there."""
