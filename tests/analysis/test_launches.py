"""speedlab.analysis.launches: whether an asynchronous device waited on the host's launches,
and whether longer than for input, which decides between the doctor's launch-bound finding and
its data findings."""

from __future__ import annotations

from dataclasses import replace

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.launches import launches_first, split_notes
from tests.doctor_runs import kinds, the
from tests.records import run_of


def traced(data: float, batch: float, busy: float) -> object:
    """A GPU run whose own trace of a step held ``busy`` seconds of work."""
    run = replace(run_of([data] * 20, [batch] * 20, samples=64), device="cuda")
    return replace(run, device_busy={"busy": busy})


def test_a_gpu_waiting_longer_on_launches_than_for_input_is_launch_bound_with_its_data_wait() -> (
    None
):
    """The H200's launch-bound workload on 2026-11-30: 0.6 ms for data (12% of the step) and
    4.4 ms of batch_time, of which the GPU worked 0.3 ms. The launches are the limit; the data
    wait, smaller, is in the same finding, not an io_bound or cpu_bound one of its own."""
    run = traced(data=0.0006, batch=0.0044, busy=0.0003)
    found = kinds(diagnose(run))
    assert "overhead_bound" in found and not {"io_bound", "cpu_bound"} & set(found)
    evidence = the(diagnose(run), "overhead_bound").evidence
    assert "sat idle 4.1 ms (93%) between kernels" in evidence
    assert "It also sat idle 0.6 ms a step (12% of the step) for want of input" in evidence
    # Idle longer for input than for launches: the data comes first, and says so alone.
    slow_data = kinds(diagnose(traced(data=0.005, batch=0.0044, busy=0.0003)))
    assert "overhead_bound" not in slow_data and {"io_bound", "cpu_bound"} & set(slow_data)
    # Busy for most of batch_time: no launch-bound finding, whatever the data.
    assert "overhead_bound" not in kinds(diagnose(traced(data=0.0006, batch=0.0044, busy=0.004)))


def test_launches_come_first_only_on_a_traced_device_that_waited_longer_on_them() -> None:
    assert launches_first(traced(data=0.0006, batch=0.0044, busy=0.0003))
    assert not launches_first(traced(data=0.005, batch=0.0044, busy=0.0003))
    assert not launches_first(traced(data=0.0006, batch=0.0044, busy=0.004))
    # No trace of the device's work (a CPU run, or a GPU run without CUPTI): never.
    untraced = replace(run_of([0.0006] * 20, [0.0044] * 20, samples=64), device="cuda")
    assert not launches_first(untraced)


def test_a_device_that_may_trace_no_step_says_why_its_time_is_not_split() -> None:
    reason = "no trace of a step: TEARDOWN_CUPTI=0 in this process keeps CUPTI attached"
    untraced = replace(traced(data=0.0006, batch=0.0044, busy=0.0003), device_busy={})
    assert split_notes(untraced) == []
    kept = replace(untraced, device_busy={"untraced": reason})
    assert split_notes(kept) == [f"Device time not split: {reason}."]
    assert kept.device_split is None
    assert split_notes(traced(data=0.0006, batch=0.0044, busy=0.0003)) == []
