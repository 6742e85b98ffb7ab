"""speedlab.measure.watches: the warm-up steps' watches, grouped by what the device has."""

from __future__ import annotations

import torch

from speedlab.measure.devices import CpuDevice
from speedlab.measure.watches import WarmupWatches
from tests.simulated_device import SimulatedDevice


def a_step() -> None:
    """A matmul forward and its backward to the weights: 2 x (2 x 4 x 8 x 2) FLOPs."""
    x, w = torch.randn(4, 8), torch.randn(8, 2, requires_grad=True)
    (x @ w).sum().backward()


def test_on_the_cpu_only_the_counted_steps_flops_are_watched() -> None:
    watches = WarmupWatches(CpuDevice(), warmup=3, counted=2)
    assert watches.each == (watches.flops,)  # no sync or trace of its own work on a CPU
    for step in range(3):
        watches.enter(step)
        a_step()
        watches.exit()
        assert watches.flops.per_step == (256 if step == 2 else None)
    watches.exit()  # again, as the fit's end does: nothing happens
    assert watches.results() == {
        "host_syncs": {},
        "flops": {"per_step": 256, "step": 2, "uncounted": []},
        "device_busy": {},
    }


def test_a_device_that_traces_its_work_is_watched_after_the_flops() -> None:
    device = SimulatedDevice()
    watches = WarmupWatches(device, warmup=2, counted=None)
    assert watches.each == (watches.flops, watches.busy)  # the trace synchronizes: last
    watches.enter(1)
    device.launch(0.001)
    watches.exit()
    assert watches.busy.busy >= 0.001
    assert watches.results()["flops"] == {}


def test_before_a_fit_nothing_is_watched() -> None:
    watches = WarmupWatches()
    watches.enter(0)
    a_step()
    watches.exit()
    assert watches.results() == {"host_syncs": {}, "flops": {}, "device_busy": {}}
