"""FLOPs: what one training step computes, counted once, and the most the device can do.

``FlopWatch`` counts one warm-up step (``counted_step``, which the figures leave out anyway)
with torch's ``FlopCounterMode``: matmuls, convolutions and attention, forward and backward, each by
its formula (a multiply-add is 2 FLOPs). Elementwise work is not counted, as in every MFU
figure. It never counts around a compiled module: the counter would run inside code that
dynamo traced, and could make it compile again. An op that does arithmetic but has no formula
(an RNN kernel, say) leaves the count unknown, with the op named, rather than too low.

Its dispatch modes tell dynamo to compile as if they were not there (``ignore_compile_internals``):
dynamo skips a frame that first runs under any other mode, and for torch 2.13 that skip is for
good (pytorch#190286), so a function of the cell's own that was compiled with ``torch.compile``
ran eager for the rest of the process after the counted step. A torch whose modes cannot say so
(before 2.9) gets no count.

The peak is the device's (``Device.peak_flops``, in a run's precision and matmul level:
``peak_of``): a CPU's is measured here by a matmul in the run's precision (``matmul_peak``); a
GPU's comes from a table of dense peaks.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Mapping
from functools import cache
from typing import Any

from speedlab.measure.numerics import matmul_kept

HEAVY_OP = re.compile(r"mm|conv|attention|rnn|lstm|gru", re.IGNORECASE)
"""Ops whose names say they do a step's arithmetic: one of these with no formula in torch's
flop registry makes the count unknown."""
COUNT_TAIL = 3
"""Steps after the counted one that still run slower than the same steps without a count:
+100, +46 and +80 us, then +31, on the 0.93 ms zero-cost step and +325, +96, +86, +61 on the
1.6 ms MLP lab's (``benchmarks/probe_overhead.py --places``, the median of 40 cycles over the
same steps' without the probe). The count comes that many steps before the warm-up ends, where
warm-up allows, so they fall in warm-up too."""
PEAK_SIZE = 1024
"""Side of the square matmul that measures a CPU's peak: large enough that its time is
arithmetic (about 2 GFLOP), small enough to take a fraction of a second."""
PEAK_REPEATS = 5
GPU_PEAKS: dict[str, dict[str, float]] = {
    "H100 SXM": {
        "float32": 67e12,
        "tf32": 494.7e12,
        "bfloat16": 989.4e12,
        "float16": 989.4e12,
    },
    "H100 PCIe": {
        "float32": 51.2e12,
        "tf32": 378e12,
        "bfloat16": 756e12,
        "float16": 756e12,
    },
    "H200": {
        "float32": 67e12,
        "tf32": 494.7e12,
        "bfloat16": 989.4e12,
        "float16": 989.4e12,
    },
    "A100": {
        "float32": 19.5e12,
        "tf32": 156e12,
        "bfloat16": 312e12,
        "float16": 312e12,
    },
    "L40S": {"float32": 91.6e12, "tf32": 183e12, "bfloat16": 362e12, "float16": 362e12},
    "L4": {"float32": 30.3e12, "tf32": 60e12, "bfloat16": 121e12, "float16": 121e12},
    "A10": {"float32": 31.2e12, "tf32": 62.5e12, "bfloat16": 125e12, "float16": 125e12},
    "T4": {"float32": 8.1e12, "float16": 65e12},
    "V100": {"float32": 15.7e12, "float16": 125e12},
}
"""Dense peaks (FLOP/s, without sparsity) from NVIDIA's data sheets, by the model's name and
the dtype its matmuls run in (``tf32``: float32 matmuls in TensorFloat-32). A GPU or a dtype not
here has no peak (T4 and V100 have no bf16 or TF32 units): MFU is then unknown, never guessed.
The V100's are the SXM2 model's (the PCIe one's are about 10% lower)."""
_GPU_NAMES = {
    "H100 SXM": r"\bH100\b.*\b(SXM|HBM3)\b",
    "H100 PCIe": r"\bH100\b.*\bPCIE\b",
    "H200": r"\bH200\b",
    "A100": r"\bA100\b",
    "L40S": r"\bL40S\b",
    "L4": r"\bL4\b",
    "A10": r"\bA10\b",
    "T4": r"\bT4\b",
    "V100": r"\bV100",
}
"""Each model's pattern, in ``torch.cuda.get_device_name()`` upper-cased (the SXM H100 says
so by its memory, "HBM3"); an A10G or an L40 matches none."""


def precision_dtype(precision: str) -> Any:
    """The dtype a Trainer's ``precision`` computes its matmuls in (float32 unless mixed or
    true 16-bit, float64 for 64)."""
    import torch

    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    return torch.float64 if precision.startswith("64") else torch.float32


def compiled_modules(module: Any) -> list[str]:
    """The modules of a LightningModule that run through ``torch.compile``, by name: wrapped
    (``torch.compile(m)``), compiled in place (``m.compile()``), or the whole model as Lightning
    compiled it for a fit ("the model")."""
    from torch._dynamo.eval_frame import OptimizedModule

    if getattr(module, "_compiler_ctx", None) is not None:
        return ["the model"]
    return [
        name or "the model"
        for name, m in module.named_modules()
        if isinstance(m, OptimizedModule) or getattr(m, "_compiled_call_impl", None) is not None
    ]


def is_compiled(module: Any) -> bool:
    """Whether the LightningModule, or any module in it, runs through ``torch.compile``."""
    return bool(compiled_modules(module))


def counted_step(module: Any, warmup: int, compiled: bool | None, counts: bool) -> int | None:
    """The step whose FLOPs are counted: a warm-up step, which no figure counts, ``COUNT_TAIL``
    steps before the first steady one (the first step, where warm-up is shorter); None without
    warm-up, around a compiled module, or where counting would change the step on the device
    (``counts``: ``Device.counts_flops``)."""
    if not warmup or compiled or not counts or is_compiled(module) or not counts_beside_compile():
        return None
    return max(0, warmup - 1 - COUNT_TAIL)


class FlopWatch:
    """Counts the FLOPs of step ``step`` (a warm-up step's index; None counts nothing).

    ``enter(step)`` and ``exit()`` go around a step's forward/backward/optimizer span, as
    ``SyncWatch``'s do; ``exit`` is safe to call when nothing is counted. ``counted`` may be
    read from another thread while training runs.
    """

    def __init__(self, step: int | None) -> None:
        self.step = step
        self.per_step: int | None = None
        self.uncounted: list[str] = []
        self._modes: tuple[Any, Any] | None = None

    def enter(self, step: int) -> None:
        if step != self.step or self._modes is not None:
            return
        counter, unformulated = _modes()
        self._modes = (counter(display=False), unformulated())
        for mode in self._modes:
            mode.__enter__()

    def exit(self) -> None:
        modes, self._modes = self._modes, None
        if modes is None:
            return
        counter, unformulated = modes
        with contextlib.ExitStack() as leave:  # the counter leaves torch's modes come what may
            leave.callback(counter.__exit__, None, None, None)
            leave.callback(unformulated.__exit__, None, None, None)
        self.uncounted = sorted(unformulated.ops)
        self.per_step = int(counter.get_total_flops())  # last: see ``counted``

    @property
    def counted(self) -> int | None:
        """The step's FLOPs once counted, where every op in it had a formula; else None. A
        plain read: ``exit`` sets ``per_step`` after ``uncounted``, so a reader that sees the
        count sees its ops too."""
        per_step = self.per_step
        return per_step if per_step and not self.uncounted else None

    def per_sample(self, samples: list[int]) -> float | None:
        """FLOPs a sample of the counted step, once it is counted and its ``samples`` (the
        records') are recorded; None before, or where the count is unknown. Plain reads, for a
        live view's thread: no lock-step with the training."""
        per_step, step = self.counted, self.step
        if per_step is None or step is None or step >= len(samples):
            return None
        return per_step / samples[step] if samples[step] else None

    def result(self) -> dict[str, Any]:
        """``{"per_step": FLOPs, "step": its index, "uncounted": [ops]}``; empty when no step
        was counted."""
        if self.per_step is None:
            return {}
        return {"per_step": self.per_step, "step": self.step, "uncounted": self.uncounted}


def counts_beside_compile() -> bool:
    """Whether this torch's dispatch modes can leave ``torch.compile`` as it is
    (``ignore_compile_internals``, torch 2.9 on), with ``FlopCounterMode``'s own mode to give
    it to: where they cannot, no step is counted."""
    from torch.utils import flop_counter
    from torch.utils._python_dispatch import TorchDispatchMode

    return hasattr(TorchDispatchMode, "ignore_compile_internals") and hasattr(
        flop_counter, "_FlopCounterMode"
    )


@cache
def _modes() -> tuple[type, type]:
    """torch's ``FlopCounterMode`` and the mode that notes the ops a step runs that look like
    arithmetic but have no FLOP formula, each with dispatch modes that dynamo compiles beside
    (classes made once torch is imported)."""
    from torch.utils import flop_counter
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(flop_counter._FlopCounterMode):
        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

    class Counter(flop_counter.FlopCounterMode):
        """``FlopCounterMode`` whose ``__enter__`` pushes ``Counting`` (torch's own, as
        ``FlopCounterMode.__enter__`` does, with the compile flag)."""

        def __enter__(self) -> Counter:
            self.flop_counts.clear()
            self.mod_tracker.__enter__()
            self.mode = Counting(self)
            self.mode.__enter__()
            return self

    class Unformulated(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        @classmethod
        def ignore_compile_internals(cls) -> bool:
            return True

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            packet = func._overloadpacket
            if packet not in flop_counter.flop_registry and HEAVY_OP.search(packet.__name__):
                self.ops.add(str(packet))
            return func(*args, **(kwargs or {}))

    return Counter, Unformulated


def gpu_peak(device_name: str, dtype: str) -> tuple[float | None, str]:
    """``GPU_PEAKS``' figure for a GPU named ``device_name`` (as CUDA names it) computing in
    ``dtype``, and where it comes from; None, with the reason, where the table has none."""
    name = device_name.upper()
    model = next((m for m, pattern in _GPU_NAMES.items() if re.search(pattern, name)), None)
    if model is None:
        return None, f"speedlab's table of GPU peaks has no {device_name}"
    peak = GPU_PEAKS[model].get(dtype)
    if peak is None:
        return None, f"the {model} has no {dtype} peak in speedlab's table (no such unit)"
    return peak, f"the {model}'s dense {dtype} peak (NVIDIA's data sheet)"


def peak_of(device: Any, settings: Mapping[str, Any]) -> dict[str, Any]:
    """``{"peak": FLOP/s or None, "peak_source": words}`` of ``device`` (a
    ``speedlab.measure.devices.Device``) in a run's ``precision`` and ``matmul`` level, as its
    ``settings`` (``RunResult.workload``) record them: the one reading of a run's peak."""
    peak, source = device.peak_flops(
        settings.get("precision", ""), settings.get("matmul", "highest")
    )
    return {"peak": peak, "peak_source": source}


@cache
def matmul_peak(dtype_name: str, threads: int, matmul: str = "highest") -> float:
    """FLOP/s of this CPU on a large square matmul in ``dtype_name`` on torch's ``threads``
    threads (the caller's ``torch.get_num_threads()``), float32 matmuls at precision
    ``matmul``: the best of a few, measured once a process for each."""
    import torch

    dtype = getattr(torch, dtype_name)
    g = torch.Generator().manual_seed(0)
    a = torch.randn(PEAK_SIZE, PEAK_SIZE, generator=g).to(dtype)
    b = torch.randn(PEAK_SIZE, PEAK_SIZE, generator=g).to(dtype)
    best = float("inf")
    with matmul_kept():
        torch.set_float32_matmul_precision(matmul)
        a @ b  # the first call sets up oneDNN's kernels
        for _ in range(PEAK_REPEATS):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    return 2 * PEAK_SIZE**3 / best
