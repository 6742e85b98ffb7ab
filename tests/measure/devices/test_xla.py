"""speedlab.measure.devices.xla without torch_xla: the timeline's arithmetic on a fake of the
runtime it asks (XLA's metrics and its wait); the real device runs in tests/xla (`make
test-xla`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from speedlab.measure.devices.xla import XlaCounts, XlaDevice, XlaTimeline
from speedlab.measure.steps import StepLog
from speedlab.results.run import empty_records


class FakeRuntime:
    """XLA's running totals as the test sets them, a wait that takes no time, and a window of
    execution times."""

    def __init__(self) -> None:
        self.now = XlaCounts()
        self.run_s: list[float] = []
        self.waits = 0

    def wait(self) -> None:  # the host's clock still runs: the figures hold to 0.1 ms
        self.waits += 1

    def counts(self) -> XlaCounts:
        return self.now

    def executions(self) -> tuple[int, list[float]]:
        return len(self.run_s), self.run_s[-3:]  # XLA keeps a window: here the last 3


def stepper(timeline: XlaTimeline, runtime: FakeRuntime, records: dict) -> Callable[..., None]:
    """``step`` on a host step log the timeline watches, as the probe gives it one."""
    log = StepLog(0.0)
    timeline.watch(log)
    return functools.partial(step, timeline, log, runtime, records)


def step(
    timeline: XlaTimeline, log: StepLog, runtime: FakeRuntime, records: dict, index: int, **step
) -> None:
    """One step as the probe stamps and records it: ``compile_s`` compiling in it, one graph
    run of ``run_s``, the host's figures given."""
    log.begins.append(0.0)
    timeline.fetch_start()
    timeline.fetch_end()
    timeline.start()
    c = runtime.now
    runtime.now = XlaCounts(
        c.compiles + bool(step.get("compile_s")),
        c.compile_s + step.get("compile_s", 0.0),
        c.executions + 1,
        c.transfers + step.get("transfers", 0),
    )
    runtime.run_s.append(step["run_s"])
    timeline.end()
    log.steps.append((len(log.begins), 0.0, 0.0, 0.0, 8))
    for key in ("data_time", "host_data_time", "batch_time", "wall"):
        records[key].append(step[key if key != "host_data_time" else "data_time"])
    records["samples"].append(8)
    records["phase"].append("warmup" if index < 1 else "steady")


def test_compiling_leaves_the_step_and_the_device_decides_the_split() -> None:
    runtime, records = FakeRuntime(), {**empty_records(), "host_data_time": []}
    timeline = XlaTimeline(warmup=1, runtime=runtime, keep=10)
    take = stepper(timeline, runtime, records)
    # Step 0 compiles 2 s inside a 2.03 s batch; its graph runs 20 ms.
    take(0, data_time=0.01, batch_time=2.03, wall=2.04, compile_s=2.0, run_s=0.02)
    # Step 1: the host waited 15 ms for the loader while the device ran step 0's 20 ms graph.
    take(1, data_time=0.015, batch_time=0.02, wall=0.035, run_s=0.02)
    # Step 2: the host waited 30 ms; the device idled for all but its 10 ms of work.
    take(2, data_time=0.03, batch_time=0.01, wall=0.04, run_s=0.01, transfers=1)
    timeline.resolve(records)  # fewer steps than kept: nothing resolved yet
    assert "compiles" not in records
    timeline.resolve(records, wait=True)
    assert runtime.waits == 2  # at the steady window's start and at the end: never a step
    assert records["compiles"] == [1, 0, 0] and records["compile_time"] == [2.0, 0.0, 0.0]
    assert records["host_transfers"] == [0, 0, 1]
    assert records["wall"][0] == pytest.approx(0.04, abs=1e-4)  # 2.04 s less 2 s of compiling
    assert records["data_time"][0] == pytest.approx(
        0.01, abs=1e-4
    )  # idle 20 ms, 10 of them for data
    assert records["batch_time"][0] == pytest.approx(0.03, abs=1e-4)
    assert records["data_time"][1] == pytest.approx(0.015, abs=1e-4)  # idle 15 ms: all of the wait
    assert records["data_time"][2] == pytest.approx(0.03, abs=1e-4)  # idle 30 ms: the loader's wait
    assert records["batch_time"][2] == pytest.approx(0.01, abs=1e-4)
    for i in range(3):  # the figures add up to the step
        assert records["data_time"][i] + records["batch_time"][i] == pytest.approx(
            records["wall"][i], abs=1e-4
        )


def test_a_step_whose_graph_times_left_xlas_window_keeps_the_hosts_split() -> None:
    runtime, records = FakeRuntime(), {**empty_records(), "host_data_time": []}
    timeline = XlaTimeline(warmup=0, runtime=runtime, keep=10)
    take = stepper(timeline, runtime, records)
    for i in range(5):
        take(i, data_time=0.01, batch_time=0.02, wall=0.03, run_s=0.001)
    timeline.resolve(records, wait=True)
    # Steps 0 and 1 ran graphs whose times XLA no longer keeps: their device work counts as
    # none, so the host's wait is all idle; the later ones have theirs.
    assert records["data_time"] == pytest.approx([0.01] * 5, abs=1e-4)
    assert records["batch_time"] == pytest.approx([0.02] * 5, abs=1e-4)


def test_the_knobs_that_cannot_act_on_xla_say_so_and_amp_is_bf16_true() -> None:
    device = XlaDevice(probe=lambda: True)
    assert device.asynchronous and not device.pins_memory and not device.counts_flops
    assert device.refusal("compile", "default").startswith("--compile default: does not apply")
    assert device.refusal("pin_memory", True).startswith("--pin-memory on: does not apply")
    assert device.refusal("compile", "off") is device.refusal("pin_memory", False) is None
    assert device.refusal("workers", 4) is None
    assert device.amp()[0] == "bf16-true" and device.matmul("high")[1] is False


@pytest.mark.parametrize(
    ("pjrt", "name"), [(None, "TPU"), ("TPU", "TPU"), ("cpu", "XLA device (CPU)")]
)
def test_the_device_is_named_by_the_hardware_xlas_runtime_is_set_to(
    monkeypatch: pytest.MonkeyPatch, pjrt: str | None, name: str
) -> None:
    if pjrt is None:
        monkeypatch.delenv("PJRT_DEVICE", raising=False)
    else:
        monkeypatch.setenv("PJRT_DEVICE", pjrt)
    assert XlaDevice().name == name


def test_a_strategy_not_lightnings_xla_ones_is_refused() -> None:
    device = XlaDevice(probe=lambda: True)
    said = device.refusal("strategy", "ddp_notebook")
    assert said.startswith("--strategy ddp_notebook: not available on the ")
    assert said.endswith("Run with --strategy auto.")
    assert device.refusal("strategy", "fsdp") is not None
    for allowed in ("auto", "xla", "xla_fsdp", None):
        assert device.refusal("strategy", allowed) is None


def test_a_precision_lightnings_xla_plugin_does_not_take_is_refused_naming_those_it_does() -> None:
    device = XlaDevice(probe=lambda: True)
    said = device.refusal("precision", "16-mixed")
    assert said.startswith("--precision 16-mixed: not available on the ")
    assert "32-true, 16-true, bf16-true (amp runs as bf16-true)" in said
    assert device.refusal("precision", "amp") is device.refusal("precision", "bf16-true") is None
