"""speedlab.measure.devices: a step's figures from the device's own timeline, checked on a
simulated asynchronous device (the real CUDA path runs in the gpu-marked tests)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator

import lightning.pytorch as pl
import numpy
import pytest

from speedlab.measure.devices import device_timeline
from speedlab.measure.devices.events import EventTimeline
from speedlab.measure.probe import SpeedProbe
from tests.doctor_runs import require_quiet
from tests.simulated_device import (
    STEP_S,
    SimulatedDevice,
    fit_on_device,
    on_device,
    probe_on_simulated_device,
)


def device_work(batch_times: list[float]) -> bool:
    """Whether the spans are the device's ``STEP_S`` of work: never less (queueing it takes the
    host a fraction of a millisecond), and less than two steps of it (a busy machine wakes the
    device's thread late)."""
    return min(batch_times) > 0.9 * STEP_S and statistics.median(batch_times) < 1.9 * STEP_S


def test_the_cpu_is_timed_by_the_hosts_clock() -> None:
    assert device_timeline("cpu") is None


def step_records(steps: int) -> dict[str, list]:
    """What the probe records from the host's clock, before the device's figures replace them."""
    return {key: [0.0] * steps for key in ("data_time", "copy_time", "batch_time", "wall")}


def test_a_steps_figures_are_the_devices_work_not_the_hosts_queueing() -> None:
    device = SimulatedDevice()
    timeline = EventTimeline(device.event, device.synchronize)
    records = step_records(6)
    for step in range(6):
        timeline.mark(step, "origin")
        device.launch(STEP_S / 2)  # the copy of the step's batch
        timeline.mark(step, "fetched")
        device.launch(STEP_S / 2)
        timeline.mark(step, "start")
        device.launch(STEP_S)
        timeline.mark(step, "end")
        timeline.mark(step, "close")
        timeline.resolve(records)
    assert records["batch_time"][-1] == 0.0  # the device is behind: not resolved yet
    timeline.resolve(records, wait=True)
    assert device_work(records["batch_time"])
    assert device_work([2 * c for c in records["copy_time"]])  # half a step's work
    assert device_work(records["data_time"])  # the copy and the work queued before the step
    assert device_work([w / 2 for w in records["wall"]])


def test_validation_inside_a_step_is_left_out_of_its_wall() -> None:
    device = SimulatedDevice()
    timeline = EventTimeline(device.event, device.synchronize)
    records = step_records(1)
    for point, work in [("origin", 0), ("fetched", 0), ("start", STEP_S), ("end", 0)]:
        timeline.mark(0, point)
        device.launch(work)
    timeline.mark(0, "val_start")
    device.launch(5 * STEP_S)
    for point in ("val_end", "close"):
        timeline.mark(0, point)
    timeline.resolve(records, wait=True)
    assert records["wall"][0] < 2 * STEP_S < 5 * STEP_S


def test_a_step_that_raised_before_it_was_recorded_is_dropped() -> None:
    device = SimulatedDevice()
    timeline = EventTimeline(device.event, device.synchronize)
    records = step_records(1)
    for step in range(2):  # step 1 is stamped, then raises before the probe records it
        for point in ("origin", "fetched", "start"):
            timeline.mark(step, point)
        device.launch(0.005)
        timeline.mark(step, "end")
        timeline.mark(step, "close")
    timeline.mark(2, "origin")  # the next step began waiting, and never got its batch
    timeline.resolve(records, wait=True)
    assert len(records["batch_time"]) == 1 and records["batch_time"][0] > 0.004


class SynchronisedTruth(pl.Callback):
    """The truth: samples over the time from the device's queue drained after step ``first - 1``
    to the queue drained at the end of the fit (what a synchronize at both edges measures)."""

    def __init__(self, device: SimulatedDevice, first: int) -> None:
        self.device, self.first = device, first
        self.samples, self.start, self.end = 0, 0.0, 0.0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == self.first - 1:
            self.device.synchronize()
            self.start = time.perf_counter()
        elif batch_idx >= self.first:
            self.samples += len(batch[0])

    def on_train_end(self, trainer, pl_module) -> None:
        self.device.synchronize()
        self.end = time.perf_counter()

    @property
    def samples_per_s(self) -> float:
        return self.samples / (self.end - self.start)


@pytest.fixture
def device() -> Iterator[SimulatedDevice]:
    with probe_on_simulated_device() as device:
        yield device


# (device work a step, the loader's sleep a sample in the main process): 8 samples a batch
WORKLOADS = {
    "device_bound": (0.02, 0.0),
    "data_bound": (0.005, 0.0025),
    "loading_hidden": (0.02, 0.00125),
}


@pytest.mark.parametrize("workload", WORKLOADS)
def test_throughput_follows_the_devices_timeline(device: SimulatedDevice, workload: str) -> None:
    """60-step runs: samples/s within 3% of the synchronised truth, whether the device, the
    loader or neither limits training; the host's wait for the loader is kept apart from the
    time the device sat idle for want of input."""
    work_s, sleep_s = WORKLOADS[workload]
    probe = SpeedProbe(warmup=5)
    truth = SynchronisedTruth(device, first=5)
    fit_on_device(on_device(device, work_s=work_s), probe, 60, truth, sleep_s=sleep_s)
    result = probe.result()
    assert result.samples_per_s == pytest.approx(truth.samples_per_s, rel=0.03)
    # The simulated device's thread needs a core to stamp its events in time.
    require_quiet(result)
    # The device's span of a step: its work, and any time it waited for the host to queue the
    # rest of the step (none where the host runs ahead of it).
    work = statistics.median(device.worked)
    assert result.batch_time > 0.95 * work
    loading = 8 * sleep_s
    assert loading <= result.host_data_time < loading + 0.003
    # The device idles for want of input only where the host's pace is slower than its work:
    # the loader's time is hidden otherwise (a busy machine can slow the host that much).
    steady = [i for i, phase in enumerate(result.records["phase"]) if phase == "steady"]
    host_pace = statistics.median(numpy.diff([result.records["t"][i] for i in steady]))
    assert result.data_time == pytest.approx(max(0.0, host_pace - result.batch_time), abs=0.003)
    if workload == "device_bound":
        assert result.batch_time == pytest.approx(work, rel=0.05)
    elif workload == "data_bound":  # the device idles while the loader outlasts its work
        assert result.data_time > loading - work - 0.003


def test_the_probe_reads_batch_time_from_the_device(device: SimulatedDevice) -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    fit_on_device(on_device(device), probe, 12)
    result = probe.result()
    assert result.steps == 12
    assert device_work(result.records["batch_time"])


def test_an_error_in_a_device_step_reaches_the_user_unchanged(device: SimulatedDevice) -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    with pytest.raises(RuntimeError, match="step 2 fails") as raised:
        fit_on_device(on_device(device, fail_at=2), probe, 12)
    assert raised.traceback[-1].name == "training_step"  # the user's frame, not ours
    result = probe.result()
    assert len(result.records["batch_time"]) == 2  # the steps before it are kept
    assert device_work(result.records["batch_time"])
