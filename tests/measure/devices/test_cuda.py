"""speedlab.measure.devices.cuda: a CUDA GPU's timeline, sync watch, memory, amp and ``--matmul``,
checked with a fake torch.cuda where no GPU is needed, and on the GPU in the gpu-marked tests."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch

from speedlab.labs.known_cost import busy_wait
from speedlab.measure.devices import CudaDevice, cuda
from speedlab.measure.numerics import MATMUL_LEVELS, MATMUL_MODES
from speedlab.measure.syncs import WATCH_STEPS, SyncWatch
from tests.simulated_device import ProbeCalls

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

A100 = ("NVIDIA A100", True, True)  # cuda_math: name, TF32 units, native bf16
T4 = ("Tesla T4", False, False)


class FakeEvent:
    """``torch.cuda.Event``'s timing part, stamped when recorded from a clock the test moves."""

    clock = 0.0
    streams: ClassVar[list[object]] = []  # the stream of each record, in order

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.stamp: float | None = None

    def record(self, stream: object = None) -> None:
        FakeEvent.streams.append(stream)
        self.stamp = FakeEvent.clock

    def query(self) -> bool:
        return True

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.stamp - self.stamp) * 1e3


def test_a_gpu_is_asynchronous_and_pinned_memory_speeds_its_copies() -> None:
    gpu = CudaDevice()
    assert (gpu.type, gpu.name, gpu.asynchronous, gpu.pins_memory) == ("cuda", "GPU", True, True)


@pytest.mark.parametrize("available", [True, False])
def test_a_gpu_is_available_where_torch_says_so(
    monkeypatch: pytest.MonkeyPatch, available: bool
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert CudaDevice().is_available() is available


def test_a_steps_edges_are_cuda_events(monkeypatch: pytest.MonkeyPatch) -> None:
    synchronized: list[bool] = []
    training_stream = object()
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: synchronized.append(True))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: training_stream)
    monkeypatch.setattr(FakeEvent, "streams", [])
    timeline = CudaDevice().timeline(5)
    calls = ProbeCalls(timeline)
    records = calls.records(1)
    at = [0.0, 0.010, 0.012, 0.032, 0.033]  # fetch start and end, batch start and end, close
    for call, FakeEvent.clock in zip(
        (calls.fetch_start, calls.fetch_end, calls.start, calls.end, calls.close), at
    ):
        call()
    timeline.resolve(records, wait=True)
    assert synchronized == [True, True]  # at the end: the queue drained, the clocks set
    expected = {"data_time": 0.012, "copy_time": 0.002, "batch_time": 0.020, "wall": 0.033}
    assert len(records.pop("launch_lag")) == 1  # the clocks set against each other at the end
    assert records == {key: [pytest.approx(value)] for key, value in expected.items()}
    # Every stamp, the clock's origin as the fit starts and the anchor that sets the clocks
    # against the host's, in the stream current as the fit starts.
    assert FakeEvent.streams == [training_stream] * 7


def test_its_host_syncs_are_watched_over_a_few_warmup_steps() -> None:
    watch = CudaDevice().sync_watch(warmup=10)
    assert isinstance(watch, SyncWatch) and watch.steps == range(1, 1 + WATCH_STEPS)


def fake_torch(initialized: bool, reserved: list[int]) -> SimpleNamespace:
    return SimpleNamespace(
        cuda=SimpleNamespace(
            is_initialized=lambda: initialized,
            device_count=lambda: len(reserved),
            memory_reserved=lambda i: reserved[i],
        )
    )


@pytest.mark.parametrize(
    ("torch_module", "held"),
    [
        (None, None),  # the user's code has not imported torch: nothing is imported to tell
        (fake_torch(False, [5]), None),  # CUDA not initialised: asking would initialise it
        (fake_torch(True, [2**30, 2**20]), 2**30 + 2**20),  # every GPU's allocator
    ],
)
def test_memory_is_read_only_where_cuda_is_initialised(
    monkeypatch: pytest.MonkeyPatch, torch_module: SimpleNamespace | None, held: int | None
) -> None:
    monkeypatch.setattr(cuda, "imported_torch", lambda: torch_module)
    assert CudaDevice().memory_reserved() == held


@pytest.mark.parametrize(
    ("math", "chosen", "why"),
    [
        (A100, "bf16-mixed", "bf16 runs natively"),
        (T4, "16-mixed", "bf16 would only be emulated (slow)"),
    ],
)
def test_amp_is_the_gpus_native_mixed_precision(
    monkeypatch: pytest.MonkeyPatch, math: tuple[str, bool, bool], chosen: str, why: str
) -> None:
    monkeypatch.setattr(cuda, "cuda_math", lambda torch: math)
    assert CudaDevice().amp() == (
        chosen,
        f"precision=amp ran as {chosen} on {math[0]}: {why} there.",
    )


@pytest.mark.parametrize("level", MATMUL_LEVELS)
@pytest.mark.parametrize("math", [A100, T4])
def test_a_matmul_level_changes_float32_matmuls_only_in_tf32_on_ampere(
    monkeypatch: pytest.MonkeyPatch, level: str, math: tuple[str, bool, bool]
) -> None:
    monkeypatch.setattr(cuda, "cuda_math", lambda torch: math)
    note, changes = CudaDevice().matmul(level)
    tf32 = MATMUL_MODES[level]["cuda"] == "tf32"
    assert changes == (math[1] and tf32)
    assert note.startswith(f"matmul={level}") and math[0] in note


@needs_gpu
@pytest.mark.gpu
def test_on_this_gpu_the_timeline_reads_the_gpus_work() -> None:
    calls = ProbeCalls(CudaDevice().timeline(5))
    records = calls.records(1)
    x = torch.randn(2048, 2048, device="cuda")
    calls.fetch_start()
    calls.fetch_end()
    calls.start()
    for _ in range(20):
        x = x @ x
        x /= x.norm()
    calls.end()
    calls.close()
    calls.timeline.resolve(records, wait=True)
    assert records["batch_time"][0] > 0 and records["wall"][0] >= records["batch_time"][0]


@needs_gpu
@pytest.mark.gpu
def test_on_this_gpu_the_busy_watch_reads_its_kernels_not_the_gaps_between_them() -> None:
    """Ten 2 ms sleeps of the GPU (timed alone, synchronised), each after 3 ms of the host's
    own work: CUPTI's trace holds the sleeps' 20 ms, not the 30 ms the GPU waited for them."""
    cycles = 10_000_000
    torch.cuda.synchronize()
    start = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    two_ms = int(0.002 * cycles / (time.perf_counter() - start))
    theirs = os.environ.get(cuda.CUPTI_TEARDOWN)
    watch = CudaDevice().busy_watch(1)
    watch.enter(0)
    for _ in range(10):
        torch.cuda._sleep(two_ms)
        busy_wait(0.003)
    during = os.environ.get(cuda.CUPTI_TEARDOWN)
    watch.close()
    assert watch.result()["busy"] == pytest.approx(0.020, rel=0.15)
    assert during == "1" and os.environ.get(cuda.CUPTI_TEARDOWN) == theirs  # set, put back


@needs_gpu
@pytest.mark.gpu
def test_on_this_gpu_amp_follows_its_capability_and_memory_is_read() -> None:
    gpu = CudaDevice()
    assert gpu.is_available()
    chosen, note = gpu.amp()
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    assert chosen == ("bf16-mixed" if native else "16-mixed")
    assert torch.cuda.get_device_name() in note
    held = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    assert gpu.memory_reserved() >= held.numel()


@pytest.mark.parametrize(
    ("precision", "matmul", "peak"),
    [
        ("bf16-mixed", "highest", 989.4e12),
        ("32-true", "high", 494.7e12),
        ("32-true", "highest", 67e12),
    ],
)
def test_a_gpus_peak_is_its_data_sheets_in_the_precision_its_matmuls_ran(
    monkeypatch: pytest.MonkeyPatch, precision: str, matmul: str, peak: float
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *_: "NVIDIA H100 80GB HBM3")
    assert CudaDevice().peak_flops(precision, matmul)[0] == peak
