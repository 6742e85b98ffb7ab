"""Which reduced-precision math this machine runs natively, and what torch's float32 matmul
precision levels set: the facts behind the ``precision=amp`` choice, the ``--matmul`` notes and
the doctor's advice on a model-bound run.

``torch.set_float32_matmul_precision`` sets two backends at once (torch 2.9 and newer read them
back as ``torch.backends.cuda.matmul.fp32_precision`` and ``torch.backends.mkldnn.matmul
.fp32_precision``): cuBLAS on a CUDA GPU and oneDNN on the CPU. It covers matrix multiplies
(Linear layers, ``@``), not convolutions: cuDNN runs float32 convolutions in TF32 already by
default (``torch.backends.cudnn.allow_tf32``).

These are the facts and their sentences; which of them apply to a run is each device's to say
(``speedlab.measure.devices``: ``Device.amp`` and ``Device.matmul``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

MATMUL_LEVELS = ("highest", "high", "medium")
MATMUL_MODES: dict[str, dict[str, str]] = {
    "highest": {"cuda": "ieee", "cpu": "ieee"},
    "high": {"cuda": "tf32", "cpu": "tf32"},
    "medium": {"cuda": "tf32", "cpu": "bf16"},
}
"""What each level asks of cuBLAS (``cuda``) and oneDNN (``cpu``) for float32 matmuls; ``ieee``
is full float32. A backend without the unit keeps full float32."""

_MODE_NAMES = {"ieee": "full float32", "tf32": "TF32", "bf16": "bf16"}
_DIGITS = {"tf32": "about 3", "bf16": "2 to 3"}
"""Significant decimal digits each reduced format keeps (11 and 8 significant bits)."""


_FP32_PRECISIONS = (
    "backends",
    "backends.cuda.matmul",
    "backends.cudnn",
    "backends.cudnn.conv",
    "backends.cudnn.rnn",
    "backends.mkldnn",
    "backends.mkldnn.matmul",
    "backends.mkldnn.conv",
    "backends.mkldnn.rnn",
)
"""The ``torch.<path>.fp32_precision`` settings of torch 2.9 and newer, parents first: a parent
set sets its children."""


class MatmulSettings:
    """torch's float32 precision settings as they are now; ``restore`` puts them back.

    The level (``torch.set_float32_matmul_precision``) and, on torch 2.9 and newer, every
    backend's ``fp32_precision``: a process that set one of those itself (torch's newer API)
    has no level to read back, and setting a level changes them all.
    """

    def __init__(self) -> None:
        import torch

        self.level = _level()
        fields = {p: getattr(_backend(torch, p), "fp32_precision", None) for p in _FP32_PRECISIONS}
        self.fields = {path: value for path, value in fields.items() if value is not None}

    def restore(self) -> None:
        import torch

        if self.level is not None:
            torch.set_float32_matmul_precision(self.level)
        for path, value in self.fields.items():
            _backend(torch, path).fp32_precision = value


@contextmanager
def matmul_kept() -> Iterator[None]:
    """torch's float32 precision settings put back as they were when the block ends."""
    kept = MatmulSettings()
    try:
        yield
    finally:
        kept.restore()


def matmul_precision() -> str:
    """torch's float32 matmul precision level; where the process set its backends' settings
    itself (torch's newer API, whose settings no level may describe), the level they are
    closest to: bf16 on the CPU is ``medium``, TF32 anywhere ``high``."""
    import torch

    level = _level()
    if level is not None:
        return level
    modes = (torch.backends.cuda.matmul.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision)
    return "medium" if modes[1] == "bf16" else "high" if "tf32" in modes else "highest"


def _level() -> str | None:
    """``torch.get_float32_matmul_precision()``; None where torch refuses to say (its newer
    API and the level were both used)."""
    import torch

    try:
        return torch.get_float32_matmul_precision()
    except RuntimeError:
        return None


def _backend(torch: Any, path: str) -> Any:
    module = torch
    for name in path.split("."):
        module = getattr(module, name)
    return module


def matmul_modes(level: str) -> dict[str, str]:
    """What torch sets for ``level``, read back from its backends (the settings are restored)."""
    import torch

    with matmul_kept():
        torch.set_float32_matmul_precision(level)
        return {
            "cuda": torch.backends.cuda.matmul.fp32_precision,
            "cpu": torch.backends.mkldnn.matmul.fp32_precision,
        }


@cache
def cpu_matmul_changes(level: str, size: int = 256) -> bool:
    """Whether ``level`` changes a float32 matmul's result on this CPU, against ``highest``.

    Measured, not inferred from CPU flags: oneDNN takes the reduced precision only where the CPU
    has the path, and only for matmuls above a size of its own (torch 2.13 on a Sapphire Rapids
    core: a 16x16 product stays float32 where a 17x17 one runs in bf16).
    """
    import torch

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(size, size, generator=g), torch.randn(size, size, generator=g)
    with matmul_kept():
        torch.set_float32_matmul_precision("highest")
        full = a @ b
        torch.set_float32_matmul_precision(level)
        return not torch.equal(full, a @ b)


CPUINFO = Path("/proc/cpuinfo")
CPU_MATH_FLAGS = {
    "avx512": ("avx512f",),
    "bf16": ("avx512_bf16", "amx_bf16"),
    "amx": ("amx_tile",),
}
"""Each fact of ``cpu_math`` and the x86 flags (``/proc/cpuinfo``) of which any one makes it
true: AVX-512's foundation; bf16 instructions (AVX512-BF16, or AMX's bf16 tiles), without
which bf16 math is converted to float32 and usually runs slower than float32 itself; AMX's
matrix tiles (Intel Sapphire Rapids and newer)."""
_CPU_MATH_NAMES = {"avx512": "AVX-512", "bf16": "bf16", "amx": "AMX"}


def cpu_flags() -> frozenset[str] | None:
    """The CPU's x86 feature flags from ``/proc/cpuinfo``; None where there are none to read
    (not Linux, or a CPU that lists no ``flags`` line, such as ARM)."""
    try:
        text = CPUINFO.read_text()
    except OSError:
        return None
    return next(
        (
            frozenset(line.split(":", 1)[1].split())
            for line in text.splitlines()
            if line.split(":", 1)[0].strip() == "flags"
        ),
        None,
    )


def cpu_math() -> dict[str, bool | None]:
    """Which reduced-precision math this CPU has (the keys of ``CPU_MATH_FLAGS``), from its
    flags; each None where the flags are unknown. Needs no torch."""
    flags = cpu_flags()
    return {
        fact: None if flags is None else bool(flags.intersection(names))
        for fact, names in CPU_MATH_FLAGS.items()
    }


def cpu_math_text(math: dict[str, bool | None]) -> str:
    """``cpu_math``'s facts in plain words: ``AVX-512 yes, bf16 no (no avx512_bf16 or amx_bf16),
    AMX no``; a bf16 that is absent names the flags it needs."""
    if all(math.get(fact) is None for fact in CPU_MATH_FLAGS):
        return "unknown (no x86 flags in /proc/cpuinfo)"
    words = []
    for fact, flags in CPU_MATH_FLAGS.items():
        have = math.get(fact)
        answer = "unknown" if have is None else "yes" if have else "no"
        if fact == "bf16" and have is False:
            answer += f" (no {' or '.join(flags)})"
        words.append(f"{_CPU_MATH_NAMES[fact]} {answer}")
    return ", ".join(words)


TENSOR_CORES_MAJOR = 7
"""Compute capability from which an NVIDIA GPU has tensor cores (fp16, Volta)."""
AMPERE_MAJOR = 8
"""Compute capability from which an NVIDIA GPU has TF32 units and runs bf16 natively (Ampere)."""


def cuda_capability_text(major: int, minor: int) -> str:
    """A CUDA compute capability and the reduced-precision math it brings, in plain words."""
    if major >= AMPERE_MAJOR:
        math = "bf16 and TF32 native"
    elif major >= TENSOR_CORES_MAJOR:
        math = "fp16 tensor cores, no native bf16 or TF32"
    else:
        math = "no tensor cores"
    return f"compute capability {major}.{minor} ({math})"


def cuda_math(torch: Any) -> tuple[str, bool, bool]:
    """The current CUDA GPU's name, whether it has TF32 units and whether it runs bf16 natively
    (both from Ampere on; ``is_bf16_supported()`` alone also counts emulation, which is slow)."""
    major, _ = torch.cuda.get_device_capability()
    native_bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    return torch.cuda.get_device_name(), major >= AMPERE_MAJOR, native_bf16


def amp_choice(cuda: bool, native_bf16: bool) -> str:
    """The mixed precision ``amp`` means: bf16 where the GPU runs it natively (no loss scaling
    needed), fp16 on older GPUs, and bf16 on a CPU, the only mixed precision there."""
    if cuda and not native_bf16:
        return "16-mixed"
    return "bf16-mixed"


def matmul_effect(level: str, cuda: tuple[str, bool, bool] | None, cpu_changes: bool) -> str:
    """One sentence on what ``--matmul level`` does on this machine: a CUDA GPU described by
    ``cuda_math``, or else the CPU, where ``cpu_changes`` is ``cpu_matmul_changes(level)``."""
    if cuda is not None:
        name, tf32, _ = cuda
        mode = MATMUL_MODES[level]["cuda"]
        if mode == "ieee":
            return f"matmul={level}: float32 matmuls run in full float32 on {name}."
        if not tf32:
            return (
                f"matmul={level} changes nothing on {name}: TF32 needs an NVIDIA Ampere or "
                "newer GPU."
            )
        return (
            f"matmul={level}: float32 matmuls (Linear layers, @) run in TF32 on {name}. "
            "Convolutions are not affected: cuDNN runs them in TF32 already by default."
        )
    mode = MATMUL_MODES[level]["cpu"]
    if mode == "ieee":
        return f"matmul={level}: float32 matmuls run in full float32 on this CPU."
    if cpu_changes:
        return (
            f"matmul={level}: oneDNN runs this CPU's larger float32 matmuls (Linear layers, @) "
            f"in {_MODE_NAMES[mode]}, with fewer significant digits ({_DIGITS[mode]} of "
            "float32's 7); whether that was faster, the run's verdict says."
        )
    return (
        f"matmul={level} changes nothing measurable on this CPU: it asks oneDNN for "
        f"{_MODE_NAMES[mode]} matmuls, which this CPU does not have, so float32 matmuls stay "
        "full float32."
    )
