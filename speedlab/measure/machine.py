"""The machine as it is: usable cores, memory and container limits, /dev/shm, accelerators,
versions.

`system_info` describes the static environment for `%speedlab system` and the run store;
`usable_cpu` and `usable_cores` are what a run may use (affinity and cgroup quota, not the
host's count).

Nothing here imports torch, torch_xla or lightning: they are only consulted when the user's code
has already imported them, and CUDA is never initialised (that would break fork-based workers).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import math
import multiprocessing
import os
import platform
import shutil
import sys
from collections import Counter
from contextlib import suppress
from pathlib import Path
from statistics import fmean
from types import ModuleType
from typing import Any

import psutil

from speedlab.measure.cgroup import PROC_SELF, cpu_quota, memory_limit
from speedlab.measure.flops import matmul_peak
from speedlab.measure.numerics import cpu_math, cpu_math_text, cuda_capability_text

SHM_PATH = "/dev/shm"


def imported(name: str) -> ModuleType | None:
    """The module ``name`` if the user's code has finished importing it, else None. Never
    imports it."""
    module = sys.modules.get(name)
    # A module still executing its import (perhaps in another thread) has this flag set.
    if module is None or getattr(module.__spec__, "_initializing", False):
        return None
    return module


def imported_torch() -> ModuleType | None:
    """torch if the user's code has finished importing it, else None. Never imports it."""
    return imported("torch")


def apple_silicon() -> bool:
    """Whether this is a Mac with Apple silicon, told as Lightning tells it: the only Macs whose
    GPU Lightning trains on (``accelerator="mps"``), and whose GPU shares the machine's memory."""
    return platform.system() == "Darwin" and platform.processor() in ("arm", "arm64")


def visible_gpus(count: int) -> list[int]:
    """Indices of the GPUs this process may use, from CUDA_VISIBLE_DEVICES (all if unset).

    Entries given as UUIDs cannot be mapped to indices here, so those count as all GPUs.
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return list(range(count))
    entries = [e.strip() for e in env.split(",") if e.strip()]
    if not all(e.isdigit() for e in entries):
        return list(range(count))
    return [i for i in dict.fromkeys(int(e) for e in entries) if i < count]


class Nvml:
    """NVML handles of the visible GPUs; empty when pynvml (nvidia-ml-py) or a driver is missing."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self._lib: Any = None
        try:
            import pynvml
        except ImportError:
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError:
            return
        self._lib = pynvml
        try:
            indices = visible_gpus(pynvml.nvmlDeviceGetCount())
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in indices]
        except pynvml.NVMLError:
            self.handles = []

    def read(self) -> tuple[float | None, int | None]:
        """Mean utilisation percent and summed used memory of the visible GPUs."""
        if not self.handles:
            return None, None
        lib = self._lib
        try:
            util = fmean(lib.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles)
            mem = sum(lib.nvmlDeviceGetMemoryInfo(h).used for h in self.handles)
        except lib.NVMLError:
            return None, None
        return float(util), int(mem)

    def gpus(self) -> list[dict[str, Any]]:
        """Each visible GPU's name, total memory and CUDA compute capability (see
        ``system_info``); a figure NVML cannot give is None."""
        lib, found = self._lib, []
        for handle in self.handles:
            name = lib.nvmlDeviceGetName(handle)
            memory = capability = None
            with suppress(lib.NVMLError):
                memory = int(lib.nvmlDeviceGetMemoryInfo(handle).total)
            with suppress(lib.NVMLError, AttributeError):  # older pynvml has no such call
                capability = list(lib.nvmlDeviceGetCudaComputeCapability(handle))
            found.append(
                {
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                    "memory_bytes": memory,
                    "capability": capability,
                }
            )
        return found

    def close(self) -> None:
        if self._lib is not None:
            with suppress(self._lib.NVMLError):
                self._lib.nvmlShutdown()
        self._lib, self.handles = None, []


def cgroup_limits(proc: Path = PROC_SELF) -> tuple[float | None, int | None]:
    """The container's CPU quota (in cores) and memory limit (bytes); None where unlimited.

    Binder and Kubernetes limit a notebook through cgroups while `os.cpu_count()` and
    `psutil.virtual_memory()` still describe the whole host. Read from this process's own
    cgroup and those above it, v2 or v1 (``speedlab.measure.cgroup``).
    """
    quota = cpu_quota(proc)
    return (quota.cores if quota is not None else None), memory_limit(proc)


def usable_cpu() -> float:
    """CPU this process can really use, in cores: logical cores and CPU affinity, or the
    cgroup's CPU quota where it is less (1.5 under a quota of 1.5 cores)."""
    cores = psutil.cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        cores = min(cores, len(os.sched_getaffinity(0)))
    quota = cpu_quota()
    return min(float(cores), quota.cores) if quota is not None else float(cores)


def usable_cores() -> int:
    """Whole cores this process can use (``usable_cpu`` rounded up, at least 1): a quota of 1.5
    cores lets two threads run, each part of the time."""
    return max(1, math.ceil(usable_cpu()))


def start_method() -> str:
    """The start method new processes get: the process's, else the platform's default (the
    first listed), read without fixing it, as asking multiprocessing for it would."""
    return (
        multiprocessing.get_start_method(allow_none=True)
        or multiprocessing.get_all_start_methods()[0]
    )


def system_info() -> dict[str, Any]:
    """The static environment: cores and their reduced-precision math, memory, /dev/shm, GPUs
    and other accelerators, versions, start method.

    ``cpu_math`` is ``speedlab.measure.numerics.cpu_math`` (AVX-512, bf16, AMX from the CPU's
    flags); ``torch_cpu_capability`` the vector instructions torch's CPU kernels use, where the
    user's code has imported torch, and ``cpu_peak_flops`` the CPU's float32 matmul FLOP/s on
    torch's threads, measured once a process (``speedlab.measure.flops.matmul_peak``). Each of
    ``gpus`` is ``{"name", "memory_bytes",
    "capability"}`` with the CUDA compute capability as ``[major, minor]``, None where it
    cannot be read without initialising CUDA. ``accelerators`` (see ``accelerators``) names
    every device a run may train on besides the CPU: CUDA GPUs, an Apple GPU, XLA devices.
    """
    memory = psutil.virtual_memory()
    shm = shutil.disk_usage(SHM_PATH) if os.path.isdir(SHM_PATH) else None
    quota, memory_limit = cgroup_limits()
    torch = imported_torch()
    gpus = _gpus(torch)
    return {
        "cores_logical": psutil.cpu_count(logical=True),
        "cores_physical": psutil.cpu_count(logical=False),
        "cores_usable": usable_cores(),
        "cpu_quota_cores": quota,
        "cpu_math": cpu_math(),
        "torch_cpu_capability": _torch_cpu_capability(torch),
        "cpu_peak_flops": (
            matmul_peak("float32", torch.get_num_threads()) if torch is not None else None
        ),
        "ram_total_bytes": memory.total,
        "ram_available_bytes": memory.available,
        "ram_limit_bytes": memory_limit,
        "shm_total_bytes": shm.total if shm else None,
        "shm_free_bytes": shm.free if shm else None,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _version("torch"),
        "lightning": _version("lightning"),
        "pytorch_lightning": _version("pytorch_lightning"),
        "cuda": torch.version.cuda if torch is not None else None,
        "gpus": gpus,
        "accelerators": accelerators(gpus, torch, memory.total),
        "start_method": start_method(),
    }


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _torch_cpu_capability(torch: ModuleType | None) -> str | None:
    """torch's choice of CPU kernels (``"AVX2"``, ``"AVX512"``...); None without torch."""
    capability = getattr(getattr(torch, "backends", None), "cpu", None)
    return capability.get_cpu_capability() if capability is not None else None


def _gpus(torch: ModuleType | None) -> list[dict[str, Any]]:
    """The visible GPUs from NVML, else from torch without initialising CUDA: where CUDA has
    not started, torch gives their count only."""
    nvml = Nvml()
    try:
        if nvml.handles:
            return nvml.gpus()
    finally:
        nvml.close()
    if torch is None:
        return []
    count = torch.cuda.device_count()  # uses NVML when it can, so it does not initialise CUDA
    if not torch.cuda.is_initialized():
        return [
            {"name": "CUDA GPU", "memory_bytes": None, "capability": None} for _ in range(count)
        ]
    found = []
    for i in range(count):
        props = torch.cuda.get_device_properties(i)
        found.append(
            {
                "name": props.name,
                "memory_bytes": int(props.total_memory),
                "capability": [props.major, props.minor],
            }
        )
    return found


def accelerators(
    gpus: list[dict[str, Any]], torch: ModuleType | None, ram_bytes: int
) -> list[dict[str, Any]]:
    """The devices besides the CPU that a run here may train on, each ``{"type", "name",
    "count", "memory_bytes", "note"}``: ``type`` as ``torch.device.type`` names it,
    ``memory_bytes`` each device's (None where unknown), ``note`` what the figures mean or why
    one is missing.

    CUDA GPUs are ``gpus`` (``system_info``'s) grouped by model. An Apple GPU shares the
    machine's memory, so its memory is ``ram_bytes``. XLA devices are counted only where the
    user's code has imported torch_xla and started its runtime: importing it picks a device
    (probing CUDA), and counting starts the runtime.
    """
    cuda = Counter(
        (gpu["name"], gpu["memory_bytes"], tuple(gpu["capability"] or ())) for gpu in gpus
    )
    return [
        *(
            _accelerator(
                "cuda",
                name,
                count,
                memory,
                cuda_capability_text(*capability)
                if capability
                else "its model is read through NVML (nvidia-ml-py) or once CUDA has started",
            )
            for (name, memory, capability), count in cuda.items()
        ),
        *_apple_gpu(torch, ram_bytes),
        *_xla_devices(),
    ]


def _accelerator(
    type_name: str, name: str, count: int | None, memory: int | None, note: str
) -> dict[str, Any]:
    return {"type": type_name, "name": name, "count": count, "memory_bytes": memory, "note": note}


def _apple_gpu(torch: ModuleType | None, ram_bytes: int) -> list[dict[str, Any]]:
    """The GPU of Apple silicon, where torch's MPS backend works (or, with torch not imported,
    unchecked)."""
    shared = "unified memory: its memory is the machine's RAM, shared with the CPU"
    if not apple_silicon():
        return []
    if torch is None:
        note = f"{shared}; torch is not imported here, so whether MPS works is not checked"
        return [_accelerator("mps", "Apple GPU", 1, ram_bytes, note)]
    mps = torch.backends.mps
    if not mps.is_available():
        return []
    # A newer torch names the GPU and counts its cores.
    name = mps.get_name() if hasattr(mps, "get_name") else "Apple GPU"
    cores = f"{mps.get_core_count()} GPU cores; " if hasattr(mps, "get_core_count") else ""
    return [_accelerator("mps", name, 1, ram_bytes, cores + shared)]


def _xla_devices() -> list[dict[str, Any]]:
    """The XLA devices torch_xla would train on, counted where its runtime has started."""
    xla = imported("torch_xla")
    if xla is None:
        if importlib.util.find_spec("torch_xla") is None:
            return []
        kind = os.environ.get("PJRT_DEVICE")
        note = (
            "torch_xla is installed but not imported here, and importing it picks a device: "
            "its devices are counted once this process has imported it"
        )
        return [_accelerator("xla", kind or "XLA device", None, None, note)]
    runtime = importlib.import_module("torch_xla.runtime")
    kind = runtime.device_type() or "XLA device"
    started = getattr(getattr(xla, "_XLAC", None), "_xla_runtime_is_initialized", bool)()
    if not started:
        note = "not counted: XLA's runtime has not started in this process, and counting starts it"
        return [_accelerator("xla", kind, None, None, note)]
    count = runtime.global_runtime_device_count()
    return [_accelerator("xla", kind, count, None, "its memory is not read here")]


def format_bytes(n: float | None) -> str:
    """`1536` -> '1.5 KiB'; None -> 'n/a'."""
    if n is None:
        return "n/a"
    power = min(int(math.log(abs(n), 1024)), 4) if abs(n) >= 1024 else 0
    unit = ("B", "KiB", "MiB", "GiB", "TiB")[power]
    return f"{n:.0f} B" if power == 0 else f"{n / 1024**power:.1f} {unit}"


_NONE_FOUND = (
    "none found, though with torch not imported here a CUDA GPU is seen only through NVML",
    "none found: a run here trains on the CPU",
)
"""What ``%speedlab system`` says without accelerators: torch imported, or not (then a CUDA GPU
is found only if nvidia-ml-py is installed)."""


def format_system_info(info: dict[str, Any]) -> str:
    """Readable lines for `%speedlab system`."""
    limit = info.get("ram_limit_bytes")
    shm_total = info.get("shm_total_bytes")
    devices = [_accelerator_text(a) for a in info.get("accelerators") or []]
    torch = info.get("torch") or "not installed"
    if info.get("cuda"):
        torch += f" (built for CUDA {info['cuda']})"
    cpu_words = cpu_math_text(info.get("cpu_math") or {})
    if info.get("torch_cpu_capability"):
        cpu_words += f"; torch's CPU kernels use {info['torch_cpu_capability']}"
    if info.get("cpu_peak_flops"):
        cpu_words += (
            f"; {info['cpu_peak_flops'] / 1e9:.1f} GFLOP/s on a float32 matmul (measured: the "
            "peak that MFU is a share of)"
        )
    rows = [
        (
            "CPU cores",
            f"{info['cores_logical']} logical, {info['cores_physical'] or '?'} physical, "
            f"{info['cores_usable']} usable by this process"
            + (
                f" (a CPU quota of {quota:g} cores)"
                if (quota := info.get("cpu_quota_cores"))
                else ""
            ),
        ),
        ("CPU math", cpu_words),
        (
            "RAM",
            f"{format_bytes(info['ram_total_bytes'])} total, "
            f"{format_bytes(info['ram_available_bytes'])} available"
            + (f", container limit {format_bytes(limit)}" if limit else ""),
        ),
        (
            "/dev/shm",
            f"{format_bytes(shm_total)} total, {format_bytes(info['shm_free_bytes'])} free"
            if shm_total is not None
            else "not available",
        ),
        *(
            ("Accelerators" if i == 0 else "", text)
            for i, text in enumerate(
                devices or [_NONE_FOUND[bool(info.get("torch_cpu_capability"))]]
            )
        ),
        ("Python", f"{info['python']} on {info['platform']}"),
        ("torch", torch),
        ("lightning", info.get("lightning") or "not installed"),
        ("pytorch_lightning", info.get("pytorch_lightning") or "not installed"),
        ("start method", info["start_method"]),
    ]
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _accelerator_text(accelerator: dict[str, Any]) -> str:
    """One entry of ``accelerators``: its type, count and name, memory and note."""
    count, memory = accelerator["count"], accelerator["memory_bytes"]
    words = [
        f"{accelerator['type'].upper()}: "
        + (f"{count} x " if count and count > 1 else "")
        + accelerator["name"]
    ]
    if memory:
        words.append(format_bytes(memory) + (" each" if count and count > 1 else ""))
    words.append(accelerator["note"])
    return ", ".join(words)
