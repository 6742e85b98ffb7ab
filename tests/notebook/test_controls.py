"""The panel's controls ask the device layer what cannot act where a run trains: each device
made available here through the registry (``speedlab.measure.devices.DEVICES``), the way
``tests/measure/test_devices.py`` does, without its hardware."""

from __future__ import annotations

import shutil

import pytest

from speedlab.measure import devices
from speedlab.measure.devices import CudaDevice, MpsDevice, PlainDevice, XlaDevice
from speedlab.notebook.controls import WHOLE, hardware_limits, limit_note
from speedlab.notebook.panel import Panel
from speedlab.results.knobs import explain, option_text


class Gpu(CudaDevice):
    """A CUDA GPU that is there, with amp as on a GPU with native bf16 or without it."""

    def __init__(self, amp: str = "bf16-mixed") -> None:
        self.chosen = amp

    def is_available(self) -> bool:
        return True

    def amp(self) -> tuple[str, str]:
        return self.chosen, f"precision=amp ran as {self.chosen}"


class Npu(PlainDevice):
    """A device that refuses one value of a knob and every value of another."""

    def __init__(self) -> None:
        super().__init__("npu", name="NPU")

    def refusal(self, knob: str, value: object) -> str | None:
        if (knob, value) == ("precision", "16-true") or knob == "workers":
            return f"{option_text(knob, value)}: the NPU cannot"
        return None


class AppleGpu(MpsDevice):
    """An Apple GPU that is there, with torch's MPS autocast taking bf16."""

    def is_available(self) -> bool:
        return True

    def amp(self) -> tuple[str, str]:
        return "bf16-mixed", "precision=amp ran as bf16-mixed on the Apple GPU"


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    """A C++ compiler is found, as torch.compile needs on any machine."""
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")


def on(monkeypatch: pytest.MonkeyPatch, type_name: str, device: devices.Device) -> Panel:
    """A panel where ``device`` is the one a run trains on by default."""
    monkeypatch.setitem(devices.DEVICES, type_name, lambda: device)
    assert devices.default_device() is device
    return Panel(lambda: None, store=False)


def test_on_xla_compile_and_pin_memory_are_disabled_with_the_refusal(
    monkeypatch: pytest.MonkeyPatch, compiler: None
) -> None:
    xla = XlaDevice(probe=lambda: True)
    panel = on(monkeypatch, "xla", xla)
    for knob, value in (("compile", "on"), ("pin_memory", True)):
        refusal = xla.refusal(knob, value)
        assert refusal is not None
        reason = panel.limits[knob][WHOLE]
        assert refusal.endswith(reason) and reason.startswith("does not apply on the TPU: XLA")
        assert panel.controls[knob].disabled
        assert panel.controls[knob].tooltip == f"not available: {reason}\n\n{explain(knob)}"
    assert "compiles each step's graph itself" in panel.limits["compile"][WHOLE]
    # Lightning's XLA precision has no mixed mode: neither is offered, the true ones are.
    options = panel.controls["precision"].options
    assert "16-mixed" not in options and "bf16-mixed" not in options
    assert {"bf16-true", "32-true"} <= set(options)
    assert "amp runs as bf16-true" in panel.limits["precision"]["bf16-mixed"]
    # Lightning trains XLA devices with its XLA strategies only: auto is offered, ddp is not.
    assert panel.controls["strategy"].options == ("as written", "auto")
    assert "XLA strategies only" in panel.limits["strategy"]["ddp_notebook"]
    assert not panel.controls["workers"].disabled
    panel._set_running(False, panel.chosen_knobs())  # a run's end enables only what can act
    assert panel.controls["compile"].disabled and not panel.controls["precision"].disabled


def test_on_a_cuda_gpu_compile_and_pin_memory_stay_enabled(
    monkeypatch: pytest.MonkeyPatch, compiler: None
) -> None:
    panel = on(monkeypatch, "cuda", Gpu())
    assert "pin_memory" not in panel.limits and "compile" not in panel.limits
    for knob in ("compile", "pin_memory", "precision"):
        assert not panel.controls[knob].disabled
        assert panel.controls[knob].tooltip == explain(knob)
    assert "reduce-overhead" in panel.controls["compile"].options
    assert {"16-mixed", "bf16-mixed"} <= set(panel.controls["precision"].options)


def test_a_gpu_without_native_bf16_is_not_offered_bf16() -> None:
    limits = hardware_limits(Gpu(amp="16-mixed"))
    assert set(limits["precision"]) == {"bf16-mixed", "bf16-true"}
    assert limits["precision"]["bf16-mixed"].startswith("amp runs as 16-mixed on the GPU here")


def test_on_an_apple_gpu_fp16_mixed_is_offered_and_pinning_is_not(
    monkeypatch: pytest.MonkeyPatch, compiler: None
) -> None:
    panel = on(monkeypatch, "mps", AppleGpu())
    assert "precision" not in panel.limits  # MPS autocast takes fp16 and bf16
    assert panel.controls["pin_memory"].disabled
    assert panel.limits["compile"] == {"reduce-overhead": "its CUDA graphs need a CUDA GPU"}


def test_on_the_cpu_fp16_mixed_and_pinning_are_not_offered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(devices, "DEVICES", {"cpu": devices.CpuDevice})  # a CPU-only machine
    limits = hardware_limits()
    assert limits["precision"] == {
        "16-mixed": "fp16 mixed precision needs a GPU; on a CPU Lightning runs bf16-mixed instead"
    }
    assert limit_note(limits["pin_memory"]) == (
        "not available: pinned memory only speeds up copies to a CUDA GPU, and there is none here"
    )
    assert limit_note({"16-mixed": "a", "bf16-true": "b"}) == (
        "16-mixed not offered: a; bf16-true not offered: b"
    )


def test_a_refused_value_is_not_offered_and_a_knob_refused_whole_is_disabled() -> None:
    limits = hardware_limits(Npu())
    assert limits["precision"]["16-true"] == "the NPU cannot"
    assert "32-true" not in limits["precision"]
    assert limits["workers"] == {WHOLE: "the NPU cannot"}
