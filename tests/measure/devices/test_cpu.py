"""speedlab.measure.devices.cpu: the CPU is timed by the host's clock, amp is bf16 there, the
``--matmul`` note follows what this CPU measurably does, and nothing asked of it touches CUDA."""

from __future__ import annotations

from typing import NoReturn

import pytest
import torch

from speedlab.measure.devices import CpuDevice, device_for, memory_reserved
from speedlab.measure.numerics import MATMUL_LEVELS, cpu_matmul_changes


def test_the_cpu_is_synchronous_and_gains_nothing_from_pinned_memory() -> None:
    cpu = CpuDevice()
    assert cpu.is_available()
    assert cpu.timeline(5) is None and not cpu.asynchronous
    assert cpu.sync_watch(warmup=5) is None
    assert cpu.memory_reserved() is None
    assert not cpu.pins_memory


def test_amp_is_bf16_on_the_cpu_and_says_why() -> None:
    chosen, note = CpuDevice().amp()
    assert chosen == "bf16-mixed"
    assert (
        note.startswith("precision=amp ran as bf16-mixed on the CPU:")
        and "Lightning runs only bf16 as mixed precision on a CPU" in note
    )


def test_the_cpus_math_is_its_flags_and_what_the_matmul_levels_measurably_do(
    fake_cpu_flags,
) -> None:
    """The facts a run records (``workload["math"]``) are those ``%speedlab system`` shows."""
    fake_cpu_flags("avx512f avx512_bf16")
    assert CpuDevice().math() == {
        "avx512": True,
        "bf16": True,
        "amx": False,
        "matmul_medium": cpu_matmul_changes("medium"),
        "matmul_high": cpu_matmul_changes("high"),
    }


@pytest.mark.parametrize("level", MATMUL_LEVELS)
def test_a_matmul_level_changes_what_this_cpu_measurably_changes(level: str) -> None:
    note, changes = CpuDevice().matmul(level)
    assert changes == cpu_matmul_changes(level)
    assert note.startswith(f"matmul={level}") and "this CPU" in note
    if not changes:
        assert "full float32" in note


def test_nothing_asked_of_the_cpu_touches_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forked DataLoader workers break once CUDA is initialised: the CPU never asks it."""

    def touched(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("CUDA was asked")

    for name in ("is_available", "_lazy_init", "init", "device_count", "is_initialized"):
        monkeypatch.setattr(torch.cuda, name, touched)
    cpu = device_for("cpu")
    assert cpu.is_available() and cpu.amp()[0] == "bf16-mixed"
    assert cpu.timeline(5) is cpu.sync_watch(5) is cpu.memory_reserved() is None
    assert all(cpu.matmul(level)[0] for level in MATMUL_LEVELS)
    assert (cpu.name, cpu.asynchronous, cpu.pins_memory) == ("cpu", False, False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert memory_reserved() is None  # the CUDA device looks only where CUDA is initialised
