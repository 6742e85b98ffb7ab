"""speedlab.measure.devices: a step's batch_time from the device's own timeline, checked on a
simulated asynchronous device (the real CUDA path runs in the gpu-marked tests)."""

from __future__ import annotations

import statistics
import time
import warnings

import lightning.pytorch as pl
import pytest

import speedlab.measure.probe
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.devices import device_timer
from speedlab.measure.devices.cuda import CudaTimer
from speedlab.measure.probe import SpeedProbe
from tests.simulated_device import SimulatedDevice

STEP_S = 0.02  # the device's work per step


def device_work(batch_times: list[float]) -> bool:
    """Whether the spans are the device's ``STEP_S`` of work: never less (queueing it takes the
    host a fraction of a millisecond), and about that (a busy machine wakes the device's thread
    late: more, now and then)."""
    return min(batch_times) > 0.9 * STEP_S and statistics.median(batch_times) < 1.5 * STEP_S


def test_the_cpu_is_timed_by_the_hosts_clock() -> None:
    assert device_timer("cpu") is None


def test_batch_time_is_the_devices_work_not_the_hosts_queueing() -> None:
    device = SimulatedDevice()
    timer = CudaTimer(event=device.event, synchronize=device.synchronize)
    batch_times: list[float] = []
    for step in range(6):
        start = time.perf_counter()
        timer.start()
        device.launch(STEP_S)
        timer.stop(step)
        batch_times.append(time.perf_counter() - start)  # what the host saw: queueing only
        timer.resolve(batch_times)
    assert max(batch_times[-3:]) < STEP_S / 4  # the device is behind: not resolved yet
    timer.resolve(batch_times, wait=True)
    assert device_work(batch_times)


def test_a_step_that_raised_before_it_was_recorded_is_dropped() -> None:
    device = SimulatedDevice()
    timer = CudaTimer(event=device.event, synchronize=device.synchronize)
    batch_times = [0.0]
    for step in range(2):  # step 1 is stamped, then raises before the probe records it
        timer.start()
        device.launch(0.005)
        timer.stop(step)
    timer.resolve(batch_times, wait=True)
    assert len(batch_times) == 1 and batch_times[0] > 0.004


class OnDevice(KnownCostModel):
    """Queues ``STEP_S`` of work on the simulated device each step; step ``fail_at`` raises."""

    fail_at: int | None = None

    def training_step(self, batch, batch_idx):
        if batch_idx == self.fail_at:
            raise RuntimeError(f"step {batch_idx} fails")
        self.simulated.launch(STEP_S)
        return super().training_step(batch, batch_idx)


def on_device(device: SimulatedDevice, fail_at: int | None = None) -> OnDevice:
    # Set after __init__: Lightning copies a module's init arguments, and a device holds a lock.
    model = OnDevice(step_s=0.0)
    model.simulated, model.fail_at = device, fail_at
    return model


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> SimulatedDevice:
    """The probe times the CPU run's steps on a simulated device's clock."""
    device = SimulatedDevice()
    timer = lambda kind: CudaTimer(event=device.event, synchronize=device.synchronize)  # noqa: E731
    monkeypatch.setattr(speedlab.measure.probe, "device_timer", timer)
    return device


def fit(model: KnownCostModel, probe: SpeedProbe, steps: int) -> None:
    trainer = pl.Trainer(accelerator="cpu", max_steps=steps, callbacks=[probe], **QUIET_TRAINER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, known_cost_loader(n=400, batch_size=8))


def test_the_probe_reads_batch_time_from_the_device(device: SimulatedDevice) -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    fit(on_device(device), probe, steps=12)
    result = probe.result()
    assert result.steps == 12
    assert device_work(result.records["batch_time"])


def test_an_error_in_a_device_step_reaches_the_user_unchanged(device: SimulatedDevice) -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    with pytest.raises(RuntimeError, match="step 2 fails") as raised:
        fit(on_device(device, fail_at=2), probe, steps=12)
    assert raised.traceback[-1].name == "training_step"  # the user's frame, not ours
    result = probe.result()
    assert len(result.records["batch_time"]) == 2  # the steps before it are kept
    assert device_work(result.records["batch_time"])
