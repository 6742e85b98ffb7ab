"""The CPU: synchronous (the host's clock is the device's), and what amp and ``--matmul`` mean
on it. Nothing here touches CUDA."""

from __future__ import annotations

from speedlab.measure.devices.device import Device
from speedlab.measure.flops import matmul_peak, precision_dtype
from speedlab.measure.numerics import amp_choice, cpu_math, cpu_matmul_changes, matmul_effect


class CpuDevice(Device):
    """The host's CPU: its steps are timed by the host's clock, and pinned memory does nothing
    there (there is no copy to a device to speed up).

    Example::

        CpuDevice().amp()[0]  # "bf16-mixed"
    """

    type = "cpu"
    name = "cpu"
    host_memory = True

    def is_available(self) -> bool:
        return True

    def math(self) -> dict[str, bool | None]:
        """``avx512``, ``bf16`` (AVX512-BF16 or AMX) and ``amx``: what the CPU's flags say it
        has (``cpu_math``, as ``%speedlab system`` shows it); ``matmul_medium`` and
        ``matmul_high``: whether ``--matmul medium`` and ``high`` change float32 matmuls here
        (measured on this CPU)."""
        return cpu_math() | {
            "matmul_medium": cpu_matmul_changes("medium"),
            "matmul_high": cpu_matmul_changes("high"),
        }

    def peak_flops(self, precision: str, matmul: str) -> tuple[float | None, str]:
        """Measured: a large matmul in the precision's dtype on torch's threads."""
        import torch

        dtype = str(precision_dtype(precision)).removeprefix("torch.")
        peak = matmul_peak(dtype, torch.get_num_threads(), matmul)
        return peak, f"this CPU's measured {dtype} matmul peak"

    def amp(self) -> tuple[str, str]:
        chosen = amp_choice(cuda=False, native_bf16=False)
        return chosen, (
            f"precision=amp ran as {chosen} on the CPU: Lightning runs only bf16 as mixed "
            "precision on a CPU (torch's CPU autocast also takes fp16, fast only with "
            "AVX512-FP16 or AMX-FP16)."
        )

    def matmul(self, level: str) -> tuple[str, bool]:
        """Measured on this CPU (``cpu_matmul_changes``): oneDNN takes a reduced precision only
        where the CPU has the unit."""
        changes = cpu_matmul_changes(level)
        return matmul_effect(level, None, cpu_changes=changes), changes
