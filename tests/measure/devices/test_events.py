"""speedlab.measure.devices.events: a step's figures from events in a device's queue, checked on a
simulated asynchronous device (the real CUDA events run in tests/measure/devices/test_cuda.py's
gpu-marked tests)."""

from __future__ import annotations

import time

import pytest

from speedlab.labs.known_cost import busy_wait
from speedlab.measure.devices.events import EventTimeline
from tests.simulated_device import (
    STEP_S,
    SimulatedDevice,
    device_work,
    probe_on_simulated_device,
)


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


def test_a_timeline_given_a_stream_records_its_marks_in_that_queue() -> None:
    busy, stream = SimulatedDevice(), SimulatedDevice()
    timeline = EventTimeline(busy.event, stream.synchronize, stream=lambda: stream)
    records = step_records(1)
    busy.launch(5 * STEP_S)  # the other queue's work: the stream's marks do not wait for it
    for point in ("origin", "fetched", "start"):
        timeline.mark(0, point)
    stream.launch(STEP_S)
    for point in ("end", "close"):
        timeline.mark(0, point)
    timeline.resolve(records, wait=True)
    assert device_work(records["batch_time"])
    assert records["data_time"][0] < STEP_S
    assert busy.queue.unfinished_tasks == 1  # its work still runs: nothing waited for it


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


def test_the_launch_lag_tells_a_device_waiting_on_the_host_from_one_behind_it() -> None:
    with probe_on_simulated_device() as device:  # the device's thread gets the GIL often
        timeline = EventTimeline(device.event, device.synchronize)
        records = step_records(8)
        for step in range(8):
            for point in ("origin", "fetched", "start"):
                timeline.mark(step, point)
            if step < 4:  # the host queues the step's work at once and runs ahead
                device.launch(STEP_S)
            else:  # the host launches tiny operations more slowly than the device runs them
                for _ in range(20):
                    busy_wait(0.001)
                    device.launch(0.0)
            timeline.mark(step, "end")
            timeline.mark(step, "close")
            if step == 3:
                device.synchronize()  # the backlog gone before the host-paced steps
                settled = len(device.waits)
        timeline.resolve(records, wait=True)
    # On an idle device an event waits only for the machine to wake the device's thread: a few
    # milliseconds when another process holds the other core (CI measured 4.5 ms), which a
    # host-paced step's lag may carry.
    late = max(device.waits[settled:])
    lags, batch = records["launch_lag"], records["batch_time"]
    assert all(lag > 0.9 * STEP_S for lag in lags[:4])  # at least the step's own work behind
    assert all(lag < 0.1 * b + late for lag, b in zip(lags[4:], batch[4:])), (lags, batch, late)


def test_launch_lags_are_kept_for_the_first_steps_only() -> None:
    device = SimulatedDevice()
    timeline = EventTimeline(device.event, device.synchronize, lags=2)
    records = step_records(4)
    for step in range(4):
        for point in ("origin", "fetched", "start", "end", "close"):
            timeline.mark(step, point)
        timeline.resolve(records)
    timeline.resolve(records, wait=True)
    assert [lag is None for lag in records["launch_lag"]] == [False, False, True, True]


def test_a_fetch_inside_a_step_moves_the_devices_idle_time_to_data_time() -> None:
    """A step fed the loader's iterator: the host fetches inside the training while the device
    runs the work queued before, and the device idles only for the rest of the fetch."""
    records = step_records(1)
    with probe_on_simulated_device() as device:  # the device's thread gets the GIL often
        timeline = EventTimeline(device.event, device.synchronize)
        timeline.mark(0, "origin")
        timeline.mark(0, "start")
        device.launch(STEP_S)  # queued before the fetch: it covers about half of it
        timeline.mark(0, "wait")
        busy_wait(2 * STEP_S)  # the fetch
        fetched = time.perf_counter()
        timeline.mark(0, "wait")
        device.launch(STEP_S)
        timeline.mark(0, "end")
        timeline.mark(0, "close")
        timeline.resolve(records, wait=True)
    # The truth from the device's own record of when it worked: idle from the end of the work
    # queued before the fetch to the start of the work queued after it. That is at least the
    # rest of the fetch, and more where the host paused before queueing on: once in CI, late in
    # the suite's process, the device's record read 81 ms where the fetch ended 24 ms after its
    # work (a host pause such as a full garbage collection of the session's heap fits that).
    idle = device.spans[1][0] - device.spans[0][1]
    assert idle >= fetched - device.spans[0][1] > 0.5 * STEP_S
    assert records["data_time"][0] == pytest.approx(idle, abs=0.002)
    assert records["batch_time"][0] == pytest.approx(sum(device.worked), abs=0.002)
    assert records["copy_time"] == [0.0]
