"""speedlab.measure.devices.events: a step's figures from events in a device's queue, checked on a
simulated asynchronous device (the real CUDA events run in tests/measure/devices/test_cuda.py's
gpu-marked tests)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from speedlab.labs.known_cost import busy_wait
from speedlab.measure.devices.events import (
    READ_EVERY_S,
    READ_EVERY_STEPS,
    EventTimeline,
    Timeline,
)
from tests.simulated_device import (
    STEP_S,
    ProbeCalls,
    SimulatedDevice,
    device_work,
    probe_on_simulated_device,
)


def step(calls: ProbeCalls, launch: Callable[[], None]) -> None:
    """One step of the probe's calls, ``launch`` queueing its training batch's work."""
    calls.fetch_start()
    calls.fetch_end()
    calls.start()
    launch()
    calls.end()


def test_a_steps_figures_are_the_devices_work_not_the_hosts_queueing() -> None:
    device = SimulatedDevice()
    calls = ProbeCalls(EventTimeline(device.event, device.synchronize))
    records = calls.records(6)
    for _ in range(6):
        calls.fetch_start()  # the step's origin, and the close of the one before
        device.launch(STEP_S / 2)  # work queued while the loader fetched
        calls.fetch_end()
        device.launch(STEP_S / 2)  # the copy of the step's batch
        calls.start()
        device.launch(STEP_S)
        calls.end()
        calls.timeline.resolve(records)
    assert records["batch_time"][-1] == 0.0  # the device is behind: not resolved yet
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert device_work(records["batch_time"])
    assert device_work([2 * c for c in records["copy_time"]])  # half a step's work
    assert device_work(records["data_time"])  # the copy and the work queued before the step
    assert device_work([w / 2 for w in records["wall"]])


def test_steps_the_device_has_passed_are_read_before_the_fits_end() -> None:
    """Events in one queue are reached in order: the timeline reads every step the device has
    passed, and waits for none."""
    device = SimulatedDevice()
    calls = ProbeCalls(EventTimeline(device.event, device.synchronize))
    records = calls.records(8)
    for work in [STEP_S] * 4 + [0.5, 0.0, 0.0, 0.0]:
        step(calls, lambda work=work: device.launch(work))
    time.sleep(4 * STEP_S + 0.2)  # the device passes the first four steps, then step 4's 0.5 s
    calls.timeline.resolve(records)
    assert device_work(records["batch_time"][:4])  # four closed by the next fetch's start
    assert records["batch_time"][4:] == [0.0] * 4
    assert device.queue.unfinished_tasks  # and nothing waited for the device
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert records["batch_time"][4] > 0.45


def test_a_timeline_given_a_stream_records_its_marks_in_that_queue() -> None:
    busy, stream = SimulatedDevice(), SimulatedDevice()
    calls = ProbeCalls(EventTimeline(busy.event, stream.synchronize, stream=lambda: stream))
    records = calls.records(1)
    busy.launch(5 * STEP_S)  # the other queue's work: the stream's marks do not wait for it
    step(calls, lambda: stream.launch(STEP_S))
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert device_work(records["batch_time"])
    assert records["data_time"][0] < STEP_S
    assert busy.queue.unfinished_tasks == 1  # its work still runs: nothing waited for it


def test_validation_inside_a_step_is_left_out_of_its_wall() -> None:
    device = SimulatedDevice()
    calls = ProbeCalls(EventTimeline(device.event, device.synchronize))
    records = calls.records(1)
    step(calls, lambda: device.launch(STEP_S))
    calls.validation(lambda: device.launch(5 * STEP_S))
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert records["wall"][0] < 2 * STEP_S < 5 * STEP_S


def test_an_epochs_first_step_waits_from_the_epochs_start() -> None:
    device = SimulatedDevice()
    calls = ProbeCalls(EventTimeline(device.event, device.synchronize))
    records = calls.records(2)
    calls.epoch(0)
    device.launch(STEP_S)  # the workers' start-up, as the device idles: the first step's wait
    step(calls, lambda: device.launch(STEP_S))
    step(calls, lambda: device.launch(STEP_S))
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert records["data_time"][0] > 0.9 * STEP_S > 10 * records["data_time"][1]
    assert device_work(records["batch_time"])


def test_a_step_that_raised_before_it_was_recorded_is_dropped() -> None:
    device = SimulatedDevice()
    calls = ProbeCalls(EventTimeline(device.event, device.synchronize))
    records = calls.records(1)
    step(calls, lambda: device.launch(0.005))
    calls.fetch_start()  # step 1 is stamped, then raises before the probe records it
    calls.fetch_end()
    calls.start()
    device.launch(0.005)
    calls.timeline.end()
    calls.fetch_start()  # the next step began waiting, and never got its batch
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert len(records["batch_time"]) == 1 and records["batch_time"][0] > 0.004


def test_the_launch_lag_tells_a_device_waiting_on_the_host_from_one_behind_it() -> None:
    with probe_on_simulated_device() as device:  # the device's thread gets the GIL often
        calls = ProbeCalls(EventTimeline(device.event, device.synchronize))
        records = calls.records(8)
        for index in range(8):
            if index < 4:  # the host queues the step's work at once and runs ahead
                step(calls, lambda: device.launch(STEP_S))
            else:  # the host launches tiny operations more slowly than the device runs them
                step(calls, lambda: [(busy_wait(0.001), device.launch(0.0)) for _ in range(20)])
            if index == 3:
                device.synchronize()  # the backlog gone before the host-paced steps
                settled = len(device.waits)
        calls.close()
        calls.timeline.resolve(records, wait=True)
    # On an idle device an event waits only for the machine to wake the device's thread: a few
    # milliseconds when another process holds the other core (CI measured 4.5 ms), which a
    # host-paced step's lag may carry.
    late = max(device.waits[settled:])
    lags, batch = records["launch_lag"], records["batch_time"]
    assert all(lag > 0.9 * STEP_S for lag in lags[:4])  # at least the step's own work behind
    assert all(lag < 0.1 * b + late for lag, b in zip(lags[4:], batch[4:])), (lags, batch, late)


def test_launch_lags_are_kept_for_the_first_steps_only() -> None:
    device = SimulatedDevice()
    calls = ProbeCalls(EventTimeline(device.event, device.synchronize, lags=2))
    records = calls.records(4)
    for _ in range(4):
        step(calls, lambda: None)
        calls.timeline.resolve(records)
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert [lag is None for lag in records["launch_lag"]] == [False, False, True, True]


def test_read_events_are_recorded_again_not_made_anew() -> None:
    device = SimulatedDevice()
    made: list[object] = []
    calls = ProbeCalls(
        EventTimeline(lambda: made.append(device.event()) or made[-1], device.synchronize, lags=0)
    )
    records = calls.records(40)
    for _ in range(40):
        step(calls, lambda: None)
        device.synchronize()
        calls.timeline.resolve(records)
    assert len(made) < 10  # four events a step, 160 in all: the pool's few recorded again
    assert min(records["wall"][:39]) > 0


def test_a_fetch_inside_a_step_moves_the_devices_idle_time_to_data_time() -> None:
    """A step fed the loader's iterator: the host fetches inside the training while the device
    runs the work queued before, and the device idles only for the rest of the fetch."""
    with probe_on_simulated_device() as device:  # the device's thread gets the GIL often
        calls = ProbeCalls(EventTimeline(device.event, device.synchronize), inside=True)
        records = calls.records(1)
        calls.start()
        device.launch(STEP_S)  # queued before the fetch: it covers about half of it
        calls.fetch_start()
        busy_wait(2 * STEP_S)  # the fetch
        fetched = time.perf_counter()
        calls.fetch_end()
        device.launch(STEP_S)
        calls.end()
        calls.close()
        calls.timeline.resolve(records, wait=True)
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


def test_a_timeline_is_due_for_reading_each_quarter_second_or_each_64_steps() -> None:
    """A reading costs as much for one step as for many: fast steps are read many at once (by
    the steps' count), slow ones as often as the live view draws (by the host's clock)."""
    timeline, now = Timeline(), 100.0
    assert timeline.due(now, 1)  # the first step is read: the live view's first figures
    fast = [steps for steps in range(2, 200) if timeline.due(now + steps * 1e-3, steps)]
    assert fast == [1 + k * READ_EVERY_STEPS for k in (1, 2, 3)]
    slow_from = now + 1.0
    assert timeline.due(slow_from, 200)
    spacing = 0.4 * READ_EVERY_S  # slow steps: the clock passes READ_EVERY_S every third
    slow = [s for s in range(201, 211) if timeline.due(slow_from + (s - 200) * spacing, s)]
    assert slow == [203, 206, 209]
