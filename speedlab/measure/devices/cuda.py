"""A CUDA GPU: asynchronous, timed by events in its current stream (``events``); its host syncs
counted by torch's sync debug mode (``speedlab.measure.syncs``); its work in a warm-up step
traced by CUPTI (``busy``); what amp and ``--matmul`` mean on the GPU of this process
(``speedlab.measure.numerics``).

torch is imported only when asked, and only ``memory_reserved`` is asked while CUDA may still
be uninitialised: it never initialises it.
"""

from __future__ import annotations

import os
from functools import partial

from speedlab.measure.devices.busy import BusyWatch, ProfilerTrace
from speedlab.measure.devices.device import Device
from speedlab.measure.devices.events import EventTimeline
from speedlab.measure.flops import gpu_peak, precision_dtype
from speedlab.measure.machine import imported_torch
from speedlab.measure.numerics import MATMUL_MODES, amp_choice, cuda_math, matmul_effect
from speedlab.measure.syncs import SyncWatch

CUPTI_TEARDOWN = "TEARDOWN_CUPTI"
"""kineto's switch: "1" detaches CUPTI from the process after a trace."""


class CudaDevice(Device):
    """The current CUDA GPU. Its work is queued behind the host, so a step's edges are read
    from CUDA events; pinned memory speeds the batch's copy to it.

    Example::

        CudaDevice().timeline()  # an EventTimeline over torch.cuda.Event
    """

    type = "cuda"
    name = "GPU"
    asynchronous = True
    pins_memory = True

    def is_available(self) -> bool:
        """torch's check, which may start CUDA's driver: asked where a run is being set up
        (``default_device``), never by the sampler."""
        import torch

        return torch.cuda.is_available()

    def timeline(self, warmup: int) -> EventTimeline:
        """Events with timing in the stream current as the fit starts on the GPU (the training
        loop's), one synchronize at the end. Making it touches no GPU."""
        import torch

        return EventTimeline(
            lambda: torch.cuda.Event(enable_timing=True),
            torch.cuda.synchronize,
            stream=torch.cuda.current_stream,
        )

    def peak_flops(self, precision: str, matmul: str) -> tuple[float | None, str]:
        """The GPU's dense peak from ``GPU_PEAKS``; for float32, its TF32 peak where float32
        matmuls ran in TF32 (``matmul`` not "highest")."""
        import torch

        dtype = str(precision_dtype(precision)).removeprefix("torch.")
        if dtype == "float32" and matmul != "highest":
            dtype = "tf32"
        return gpu_peak(torch.cuda.get_device_name(), dtype)

    def sync_watch(self, warmup: int) -> SyncWatch:
        return SyncWatch(warmup)

    def busy_watch(self, warmup: int) -> BusyWatch | None:
        """CUPTI's record of the GPU's kernels, copies and memsets, through torch.profiler.

        kineto leaves CUPTI attached after a trace unless TEARDOWN_CUPTI=1, and then every later
        launch of the process costs the host more: a tiny kernel's 6.7 us read 8.2 to 13.1 us
        after one to eight traces on the H200 (make gpu-check). So the watch sets it for the
        fit, and where the process set it otherwise (torch.compile's CUDA graphs set "0": CUPTI
        torn down under them can crash), it traces nothing and says why.
        """
        import torch

        if not warmup:
            return None
        trace = partial(ProfilerTrace, "CUDA", "CUDA", torch.cuda.synchronize)
        kept = os.environ.get(CUPTI_TEARDOWN, "1")
        if kept != "1":
            return BusyWatch(
                warmup - 1,
                trace,
                untraced=f"no trace of a step: {CUPTI_TEARDOWN}={kept} in this process keeps "
                "CUPTI attached after a trace, which would slow every later kernel launch",
            )
        return BusyWatch(warmup - 1, trace, env={CUPTI_TEARDOWN: "1"})

    def memory_reserved(self) -> int | None:
        """Bytes torch's CUDA allocator holds over all GPUs, only where the user's code has
        imported torch and CUDA is already initialised.

        Checking ``torch.cuda.is_available()`` would initialise CUDA, and a process that has
        done so cannot fork DataLoader workers or ``ddp_notebook`` ranks that use CUDA.
        """
        torch = imported_torch()
        if torch is None or not torch.cuda.is_initialized():
            return None
        return sum(torch.cuda.memory_reserved(i) for i in range(torch.cuda.device_count()))

    def amp(self) -> tuple[str, str]:
        """bf16 where the GPU runs it natively, fp16 where bf16 would only be emulated."""
        import torch

        name, _, native_bf16 = cuda_math(torch)
        chosen = amp_choice(cuda=True, native_bf16=native_bf16)
        why = "bf16 runs natively" if native_bf16 else "bf16 would only be emulated (slow)"
        return chosen, f"precision=amp ran as {chosen} on {name}: {why} there."

    def matmul(self, level: str) -> tuple[str, bool]:
        """cuBLAS's float32 matmuls change only where the level asks for TF32 and the GPU has
        TF32 units (Ampere and newer)."""
        import torch

        name, tf32, native_bf16 = cuda_math(torch)
        changes = tf32 and MATMUL_MODES[level]["cuda"] != "ieee"
        return matmul_effect(level, (name, tf32, native_bf16), cpu_changes=False), changes
