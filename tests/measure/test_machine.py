"""speedlab.measure.machine's accelerators: what ``%speedlab system`` and the stored environment
say the machine trains on besides its CPU. CUDA, from NVML, is checked in test_system.py; an
Apple GPU and XLA devices with fakes of torch's MPS API and of torch_xla (no Apple or TPU
hardware ran these); the real path on this machine, which has none."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import psutil
import pytest
import torch

from speedlab.measure.machine import accelerators, format_system_info, system_info

RAM = 16 * 2**30
SHARED = "unified memory: its memory is the machine's RAM, shared with the CPU"


def accelerator_lines(info: dict) -> list[str]:
    """The ``Accelerators`` rows of ``%speedlab system``, without their label."""
    lines = format_system_info(info).splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Accelerators "))
    rows = [lines[first]] + [line for line in lines[first + 1 :] if line.startswith(" ")]
    return [row.split(None, 1)[1] if i == 0 else row.strip() for i, row in enumerate(rows)]


def test_this_machine_has_no_accelerator_and_says_so_in_one_line() -> None:
    info = system_info()  # torch is imported here: CUDA and MPS were asked
    assert not torch.cuda.is_available() and not torch.backends.mps.is_available()
    assert info["accelerators"] == []
    assert accelerator_lines(info) == ["none found: a run here trains on the CPU"]
    json.dumps(info)


def test_without_torch_imported_none_found_says_what_was_not_asked() -> None:
    info = {**system_info(), "accelerators": [], "torch_cpu_capability": None}
    assert accelerator_lines(info) == [
        "none found, though with torch not imported here a CUDA GPU is seen only through NVML"
    ]


@pytest.fixture
def on_a_mac(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apple silicon, where torch's MPS backend works."""
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)


@pytest.mark.usefixtures("on_a_mac")
def test_an_apple_gpu_has_the_machines_ram_as_its_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "get_name", lambda: "Apple M2 Max", raising=False)
    monkeypatch.setattr(torch.backends.mps, "get_core_count", lambda: 38, raising=False)
    found = accelerators([], torch, RAM)
    assert found == [
        {
            "type": "mps",
            "name": "Apple M2 Max",
            "count": 1,
            "memory_bytes": RAM,
            "note": f"38 GPU cores; {SHARED}",
        }
    ]
    info = {**system_info(), "accelerators": found}
    assert accelerator_lines(info) == [f"MPS: Apple M2 Max, 16.0 GiB, 38 GPU cores; {SHARED}"]
    monkeypatch.setattr(platform, "processor", lambda: "i386")
    assert accelerators([], torch, RAM) == []  # an Intel Mac's GPU: not one Lightning trains on
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert accelerators([], torch, RAM) == []  # torch's MPS backend does not work here


@pytest.mark.usefixtures("on_a_mac")
def test_system_info_gives_an_apple_gpu_the_ram_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.backends.mps, "get_name", raising=False)  # an older torch
    monkeypatch.delattr(torch.backends.mps, "get_core_count", raising=False)
    [gpu] = system_info()["accelerators"]
    assert (gpu["type"], gpu["name"], gpu["note"]) == ("mps", "Apple GPU", SHARED)
    assert gpu["memory_bytes"] == psutil.virtual_memory().total


@pytest.mark.parametrize(
    ("system", "processor", "found"),
    [("Darwin", "arm", True), ("Darwin", "i386", False), ("Linux", "aarch64", False)],
)
def test_without_torch_imported_apple_silicon_is_named_unchecked(
    monkeypatch: pytest.MonkeyPatch, system: str, processor: str, found: bool
) -> None:
    monkeypatch.setattr(platform, "system", lambda: system)
    monkeypatch.setattr(platform, "processor", lambda: processor)
    expected = {
        "type": "mps",
        "name": "Apple GPU",
        "count": 1,
        "memory_bytes": RAM,
        "note": f"{SHARED}; torch is not imported here, so whether MPS works is not checked",
    }
    assert accelerators([], None, RAM) == [expected] * found


def fake_torch_xla(
    monkeypatch: pytest.MonkeyPatch, kind: str | None, started: bool, count: int
) -> None:
    """torch_xla, imported by the user's code, with a PJRT device of ``kind`` and a runtime that
    has ``started`` or not: counting devices before it has started would start it."""

    def device_count() -> int:
        assert started, "counting the devices starts XLA's runtime"
        return count

    xla = ModuleType("torch_xla")
    xla._XLAC = SimpleNamespace(_xla_runtime_is_initialized=lambda: started)
    runtime = ModuleType("torch_xla.runtime")
    runtime.device_type = lambda: kind
    runtime.global_runtime_device_count = device_count
    xla.runtime = runtime
    monkeypatch.setitem(sys.modules, "torch_xla", xla)
    monkeypatch.setitem(sys.modules, "torch_xla.runtime", runtime)


def test_xla_devices_are_counted_once_the_runtime_has_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_torch_xla(monkeypatch, "TPU", started=True, count=4)
    found = accelerators([], torch, RAM)
    assert found == [
        {
            "type": "xla",
            "name": "TPU",
            "count": 4,
            "memory_bytes": None,
            "note": "its memory is not read here",
        }
    ]
    info = {**system_info(), "accelerators": found}
    assert accelerator_lines(info) == ["XLA: 4 x TPU, its memory is not read here"]


def test_xla_devices_are_not_counted_before_the_runtime_has_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_torch_xla(monkeypatch, "CPU", started=False, count=1)
    [found] = accelerators([], torch, RAM)
    assert (found["type"], found["name"], found["count"]) == ("xla", "CPU", None)
    assert found["note"].startswith("not counted: XLA's runtime has not started")


def test_an_installed_torch_xla_is_named_never_imported(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "torch_xla"
    package.mkdir()
    (package / "__init__.py").write_text("raise AssertionError('torch_xla was imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_xla", raising=False)
    monkeypatch.setenv("PJRT_DEVICE", "TPU")
    [found] = system_info()["accelerators"]
    assert (found["type"], found["name"], found["count"]) == ("xla", "TPU", None)
    assert "not imported here" in found["note"] and "torch_xla" not in sys.modules
    monkeypatch.delenv("PJRT_DEVICE")
    assert accelerators([], None, RAM)[0]["name"] == "XLA device"  # no device chosen yet


def test_cuda_gpus_are_grouped_by_model_with_their_memory_each() -> None:
    h100 = {"name": "NVIDIA H100", "memory_bytes": 80 * 2**30, "capability": [9, 0]}
    unnamed = {"name": "CUDA GPU", "memory_bytes": None, "capability": None}
    found = accelerators([h100, dict(h100)], None, RAM)
    assert [(a["name"], a["count"], a["memory_bytes"]) for a in found] == [
        ("NVIDIA H100", 2, 80 * 2**30)
    ]
    info = {**system_info(), "accelerators": found}
    assert accelerator_lines(info) == [
        "CUDA: 2 x NVIDIA H100, 80.0 GiB each, compute capability 9.0 (bf16 and TF32 native)"
    ]
    [found] = accelerators([unnamed, dict(unnamed)], None, RAM)
    assert (found["count"], found["memory_bytes"]) == (2, None)
    assert found["note"] == "its model is read through NVML (nvidia-ml-py) or once CUDA has started"
