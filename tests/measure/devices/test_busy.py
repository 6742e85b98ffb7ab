"""speedlab.measure.devices.busy: the device's work in one warm-up step, from its own trace:
torch.profiler's real trace (of the CPU's ops here; a GPU's kernels in make gpu-check) and the
simulated device's record of its work, under a real fit."""

from __future__ import annotations

import os
import time
from unittest import mock

import pytest
import torch

import speedlab.measure.devices
from speedlab.analysis.doctor import diagnose
from speedlab.analysis.launches import LAUNCH_IDLE_SHARE
from speedlab.labs.known_cost import busy_wait
from speedlab.measure.devices.busy import BusyWatch, ProfilerTrace, busy_seconds
from speedlab.measure.devices.cuda import CUPTI_TEARDOWN, CudaDevice
from speedlab.measure.probe import SpeedProbe
from tests.simulated_device import (
    STEP_S,
    OnDevice,
    SimulatedDevice,
    SimulatedTrace,
    fit_on_device,
    on_device,
    probe_on_simulated_device,
)


@pytest.fixture
def device():
    with probe_on_simulated_device() as simulated:
        yield simulated


def test_work_on_several_streams_at_once_counts_once() -> None:
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0.0, 1.0), (2.0, 3.0)]) == 2.0  # a gap of a second: idle
    assert busy_seconds([(0.0, 2.0), (1.0, 3.0), (0.5, 0.7)]) == 3.0  # overlapping, nested
    assert busy_seconds([(5.0, 6.0), (0.0, 1.0), (0.5, 5.5)]) == 6.0  # in any order


def test_the_profilers_trace_holds_the_work_not_the_gaps_between_it() -> None:
    """Five matmuls with 20 ms of host-side sleep after each: the trace's busy time is the
    matmuls' own time (timed on the host around each), not the window's."""
    a = torch.randn(384, 384)
    torch.mm(a, a)  # first-call costs out of the window
    trace = ProfilerTrace("CPU", "CPU", lambda: None)
    start, timed = time.perf_counter(), 0.0
    for _ in range(5):
        begin = time.perf_counter()
        for _ in range(8):
            torch.mm(a, a)
        timed += time.perf_counter() - begin
        time.sleep(0.02)
    window = time.perf_counter() - start
    busy = busy_seconds(trace.stop())
    assert 0.8 * timed <= busy <= timed
    assert busy < window - 0.09  # the sleeps are not work


class _Trace:
    source = "a trace"

    def __init__(self, intervals: list[tuple[float, float]] | Exception) -> None:
        self.intervals = intervals

    def stop(self) -> list[tuple[float, float]]:
        if isinstance(self.intervals, Exception):
            raise self.intervals
        return self.intervals


def test_only_its_step_is_traced_and_a_failed_steps_error_stays_the_users() -> None:
    watch = BusyWatch(2, lambda: _Trace([(0.0, 0.004), (0.006, 0.007)]))
    for step in range(4):
        watch.enter(step)
        watch.exit()
    assert watch.result() == {"step": 2, "busy": pytest.approx(0.005), "source": "a trace"}
    broken = BusyWatch(0, lambda: _Trace(RuntimeError("the device failed too")))
    broken.enter(0)
    with pytest.raises(ValueError, match="the user's"):
        try:
            raise ValueError("the user's")
        finally:
            broken.exit()  # its own error would hide the step's
    assert broken.result() == {}
    broken.enter(0)
    with pytest.raises(RuntimeError, match="the device failed too"):
        broken.exit()  # outside a failing step, it is speedlab's to show


def test_a_users_own_profiler_keeps_its_trace_and_the_step_goes_untraced() -> None:
    a = torch.randn(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as theirs:
        watch = BusyWatch(0, lambda: ProfilerTrace("CPU", "CPU", lambda: None))
        watch.enter(0)
        torch.mm(a, a)
        watch.exit()
        torch.mm(a, a)
    assert watch.result() == {}
    assert sum(event.name == "aten::mm" for event in theirs.events()) == 2


def test_a_trace_that_recorded_nothing_gives_no_figure() -> None:
    """A device step always does some work: an empty trace (profiling not permitted on that
    machine, say) is no trace, not a device idle all step."""
    watch = BusyWatch(0, lambda: _Trace([]))
    watch.enter(0)
    watch.exit()
    assert watch.result() == {}


class Launching(OnDevice):
    """Each step: ``launches`` tiny pieces of work of ``piece_s`` each, the host taking
    ``host_s`` to launch each one."""

    launches, piece_s, host_s = 20, 0.0001, 0.002

    def training_step(self, batch, batch_idx):
        for _ in range(self.launches):
            busy_wait(self.host_s)
            self.simulated.launch(self.piece_s)
        return super(OnDevice, self).training_step(batch, batch_idx)


def test_a_launch_bound_step_is_told_from_a_device_bound_one_by_the_devices_own_work(
    device: SimulatedDevice,
) -> None:
    paced = Launching(step_s=0.0)
    paced.simulated = device
    probe = SpeedProbe(warmup=4, sample_system=False)
    fit_on_device(paced, probe, 30)
    result = probe.result()
    assert result.device_busy["step"] == 3
    # The traced step's 20 pieces, as the device's thread ran them one after another (a piece
    # of another step took as long only on an idle machine: its thread wakes late under load)
    work = sum(device.worked[3 * 20 : 4 * 20])
    assert result.device_busy["busy"] == pytest.approx(work, rel=0.01)
    split = result.device_split
    assert split.busy + split.launches == pytest.approx(result.batch_time)
    # 40 ms of launching a step for 2 ms of work, which the device's thread takes two to five
    # times as long to do as it sleeps (it wakes late, and waits for the GIL). Starved on a
    # loaded machine it took 31 ms of a 46 ms step once (CI, 2 cores): the step is then not the
    # launch-bound one it was built to be, by the device's own record, and the doctor must
    # follow the record, not the build.
    found = [f for f in diagnose(result) if f.kind == "overhead_bound"]
    if split.launch_share < LAUNCH_IDLE_SHARE:
        assert not found
        pytest.skip(f"the simulated device's thread worked {work * 1e3:.0f} ms of 2 (starved)")
    assert found and "own trace of a step holds" in found[0].evidence

    probe = SpeedProbe(warmup=4, sample_system=False)
    fit_on_device(on_device(device, work_s=STEP_S), probe, 30)
    result = probe.result()
    assert result.device_busy["busy"] == pytest.approx(STEP_S, rel=0.2)
    assert result.device_split.launch_share < 0.2
    assert "overhead_bound" not in {f.kind for f in diagnose(result)}


def test_without_warm_up_nothing_is_traced(device: SimulatedDevice) -> None:
    probe = SpeedProbe(warmup=0, sample_system=False)
    fit_on_device(on_device(device), probe, 6)
    assert probe.result().device_busy == {} and probe.result().device_split is None


def test_what_a_trace_needs_is_set_from_its_step_to_the_fits_end_only_where_unset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPEEDLAB_TRACE_NEEDS", raising=False)
    monkeypatch.setenv("SPEEDLAB_TRACE_KEPT", "theirs")
    seen = []

    def started() -> _Trace:
        seen.append(os.environ.get("SPEEDLAB_TRACE_NEEDS"))
        return _Trace([(0.0, 0.001)])

    watch = BusyWatch(1, started, env={"SPEEDLAB_TRACE_NEEDS": "1", "SPEEDLAB_TRACE_KEPT": "1"})
    watch.enter(0)
    watch.exit()
    assert "SPEEDLAB_TRACE_NEEDS" not in os.environ  # not before its step
    watch.enter(1)
    watch.exit()
    assert seen == ["1"] and os.environ["SPEEDLAB_TRACE_NEEDS"] == "1"  # kept to the fit's end
    assert os.environ["SPEEDLAB_TRACE_KEPT"] == "theirs"  # the process's own setting stands
    watch.close()
    assert "SPEEDLAB_TRACE_NEEDS" not in os.environ
    assert os.environ["SPEEDLAB_TRACE_KEPT"] == "theirs"
    assert watch.result()["busy"] == pytest.approx(0.001)


def test_a_cuda_watch_detaches_cupti_after_its_trace_unless_the_process_keeps_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kineto leaves CUPTI attached after a trace unless TEARDOWN_CUPTI=1, and every later
    launch paid for it (make gpu-check's launches line): the watch sets it for its fit; where
    the process set "0" (torch.compile's CUDA graphs do), it traces nothing and says why."""
    monkeypatch.setenv(CUPTI_TEARDOWN, "0")
    kept = CudaDevice().busy_watch(warmup=2)
    kept.enter(1)
    kept.close()
    assert kept.result() == {"untraced": kept.untraced}
    assert "TEARDOWN_CUPTI=0" in kept.untraced and "slow every later kernel launch" in kept.untraced
    assert os.environ[CUPTI_TEARDOWN] == "0"

    monkeypatch.delenv(CUPTI_TEARDOWN)
    seen: list[str | None] = []

    def started(*args: object) -> _Trace:
        seen.append(os.environ.get(CUPTI_TEARDOWN))
        return _Trace([(0.0, 0.002)])

    with mock.patch("speedlab.measure.devices.cuda.ProfilerTrace", started):
        watch = CudaDevice().busy_watch(warmup=2)
    watch.enter(1)
    watch.exit()
    assert seen == ["1"] and not watch.untraced
    watch.close()
    assert CUPTI_TEARDOWN not in os.environ


class _Needs(SimulatedDevice):
    """The simulated device, its trace needing a variable set, as CUDA's needs TEARDOWN_CUPTI."""

    def busy_watch(self, warmup: int) -> BusyWatch | None:
        return BusyWatch(
            warmup - 1, lambda: SimulatedTrace(self), env={"SPEEDLAB_TRACE_NEEDS": "1"}
        )


@pytest.mark.parametrize("fails", [False, True])
def test_a_fit_puts_back_what_its_trace_set_when_it_ends_or_fails(
    monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    monkeypatch.delenv("SPEEDLAB_TRACE_NEEDS", raising=False)
    with probe_on_simulated_device():
        device = _Needs()
        seen = []

        class Watched(OnDevice):
            def training_step(self, batch, batch_idx):
                seen.append(os.environ.get("SPEEDLAB_TRACE_NEEDS"))
                if fails and batch_idx == 5:
                    raise RuntimeError("the user's step fails")
                return super().training_step(batch, batch_idx)

        model = Watched(step_s=0.0)
        model.simulated = device
        probe = SpeedProbe(warmup=2, sample_system=False)
        with mock.patch.dict(speedlab.measure.devices.DEVICES, {"cpu": lambda: device}):
            if fails:
                with pytest.raises(RuntimeError, match="the user's step fails"):
                    fit_on_device(model, probe, 8)
            else:
                fit_on_device(model, probe, 8)
    assert seen[:2] == [None, "1"]  # set as the traced warm-up step starts, and kept after it
    assert set(seen[2:]) == {"1"}
    assert "SPEEDLAB_TRACE_NEEDS" not in os.environ
