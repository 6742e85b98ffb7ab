"""speedlab.measure.devices.mps: an Apple GPU's timeline, availability, memory, amp and
``--matmul``, checked with fakes of torch's MPS API (``torch.mps``, ``torch.backends.mps``)
patched onto the real torch: no Apple hardware ran these."""

from __future__ import annotations

import platform

import pytest
import torch

from speedlab.measure import devices
from speedlab.measure.devices import CpuDevice, MpsDevice, available_devices, default_device
from speedlab.measure.numerics import MATMUL_LEVELS
from tests.simulated_device import ProbeCalls


class FakeMpsEvent:
    """``torch.mps.event.Event`` as the timeline uses it: stamped when the queue reaches it
    (``FakeMps.reach``), ``query`` once it has, ``elapsed_time`` in milliseconds."""

    def __init__(self, queue: FakeMps) -> None:
        self.queue = queue
        self.stamp: float | None = None

    def record(self) -> None:
        self.stamp = None
        self.queue.queued.append(self)

    def query(self) -> bool:
        return self.stamp is not None

    def elapsed_time(self, end: FakeMpsEvent) -> float:
        assert self.stamp is not None and end.stamp is not None
        return (end.stamp - self.stamp) * 1e3


class FakeMps:
    """The Apple GPU's queue: the test says when it reaches each queued event."""

    def __init__(self) -> None:
        self.queued: list[FakeMpsEvent] = []
        self.synchronized = 0

    def event(self, enable_timing: bool = False) -> FakeMpsEvent:
        assert enable_timing  # without it, MPS events cannot be timed
        return FakeMpsEvent(self)

    def reach(self, at: float) -> None:
        self.queued.pop(0).stamp = at

    def synchronize(self) -> None:
        self.synchronized += 1
        for event in self.queued:
            event.stamp = 1.0  # work after the last step's close, far later
        self.queued.clear()


@pytest.fixture
def fake_mps(monkeypatch: pytest.MonkeyPatch) -> FakeMps:
    queue = FakeMps()
    monkeypatch.setattr(torch.mps.event, "Event", queue.event)
    monkeypatch.setattr(torch.mps, "synchronize", queue.synchronize)
    return queue


@pytest.fixture
def on_a_mac(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's MPS backend works, on Apple silicon; no CUDA."""
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("DISABLE_MPS", raising=False)


def records(steps: int) -> dict[str, list[float]]:
    return {key: [0.0] * steps for key in ("data_time", "copy_time", "batch_time", "wall")}


def test_an_apple_gpu_is_asynchronous_and_pins_nothing() -> None:
    gpu = MpsDevice()
    assert (gpu.type, gpu.name, gpu.asynchronous, gpu.pins_memory) == ("mps", "GPU", True, False)
    assert gpu.sync_watch(warmup=5) is None  # torch's sync debug mode is CUDA's only


def test_a_steps_figures_are_the_apple_gpus_stamps(fake_mps: FakeMps) -> None:
    calls = ProbeCalls(MpsDevice().timeline(5))
    out = calls.records(2)
    fake_mps.reach(0.0)  # the clock's origin, stamped as the fit starts
    for _ in (0, 1):
        for call in (calls.fetch_start, calls.fetch_end, calls.start, calls.end):
            call()
    calls.close()
    # fetch start and end, batch start and end: step 1's fetch start closes step 0
    for at in (0.0, 0.010, 0.012, 0.032, 0.033):  # the GPU has done step 0, not step 1
        fake_mps.reach(at)
    calls.timeline.resolve(out)
    assert fake_mps.synchronized == 0  # read as the GPU passes, never a wait per step
    assert out["batch_time"] == [pytest.approx(0.020), 0.0]
    for at in (0.040, 0.041, 0.071, 0.072):
        fake_mps.reach(at)
    calls.timeline.resolve(out, wait=True)
    assert fake_mps.synchronized == 2  # at the end: the queue drained, the clocks set
    expected = {
        "data_time": [0.012, 0.008],
        "copy_time": [0.002, 0.001],
        "batch_time": [0.020, 0.030],
        "wall": [0.033, 0.039],
    }
    assert len(out.pop("launch_lag")) == len(expected["batch_time"])
    assert out == {key: pytest.approx(values) for key, values in expected.items()}


@pytest.mark.parametrize(
    ("backend", "processor", "disabled", "available"),
    [
        (True, "arm", None, True),
        (True, "arm", "1", False),  # DISABLE_MPS=1, as Lightning reads it
        (True, "i386", None, False),  # an Intel Mac: Lightning trains on its CPU
        (False, "arm", None, False),  # torch's MPS backend does not work here
    ],
)
def test_an_apple_gpu_is_available_where_lightning_would_pick_it(
    monkeypatch: pytest.MonkeyPatch,
    backend: bool,
    processor: str,
    disabled: str | None,
    available: bool,
) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: backend)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    monkeypatch.setattr(platform, "processor", lambda: processor)
    if disabled is None:
        monkeypatch.delenv("DISABLE_MPS", raising=False)
    else:
        monkeypatch.setenv("DISABLE_MPS", disabled)
    assert MpsDevice().is_available() is available


@pytest.mark.usefixtures("on_a_mac")
def test_on_a_mac_a_run_trains_on_the_apple_gpu_by_default() -> None:
    assert [type(d) for d in available_devices()] == [MpsDevice, CpuDevice]
    assert type(default_device()) is MpsDevice


def test_on_this_machine_there_is_no_apple_gpu() -> None:
    assert not MpsDevice().is_available()
    assert MpsDevice().memory_reserved() is None  # and asking does not raise


@pytest.mark.usefixtures("on_a_mac")
def test_memory_is_what_metals_driver_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 3 * 2**20)
    monkeypatch.setattr(torch.mps, "current_allocated_memory", lambda: 2**20)
    assert MpsDevice().memory_reserved() == 3 * 2**20  # torch's cache included
    assert devices.memory_reserved() == 3 * 2**20  # no CUDA initialised: the GPU's alone


@pytest.mark.parametrize(
    ("version", "macos", "chosen", "said"),
    [
        ("2.13.0", (15, 1), "bf16-mixed", "MPS autocast takes bf16 here"),
        ("2.6.0", (14, 0), "bf16-mixed", "MPS autocast takes bf16 here"),
        ("2.13.0", (13, 6), "16-mixed", "bf16 only from torch 2.6 on macOS 14"),
        ("2.5.1", (15, 1), "16-mixed", "bf16 only from torch 2.6 on macOS 14"),
        ("2.4.1", (15, 1), "32-true", "torch 2.4.1 has no autocast on MPS"),
    ],
)
def test_amp_is_what_torchs_autocast_on_mps_takes(
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    macos: tuple[int, int],
    chosen: str,
    said: str,
) -> None:
    monkeypatch.setattr(torch, "__version__", version)
    monkeypatch.setattr(
        torch.backends.mps, "is_macos_or_newer", lambda major, minor: macos >= (major, minor)
    )
    got, note = MpsDevice().amp()
    assert got == chosen
    assert note.startswith(f"precision=amp ran as {chosen} on the Apple GPU: ") and said in note
    assert "CUDA" not in note


@pytest.mark.parametrize("level", MATMUL_LEVELS)
def test_a_matmul_level_is_never_called_inert_where_its_effect_is_unknown(level: str) -> None:
    note, changes = MpsDevice().matmul(level)
    assert changes is (level != "highest")
    assert note.startswith(f"matmul={level}") and "Apple GPU" in note and "CUDA" not in note
    if changes:
        assert "not known to change" in note
