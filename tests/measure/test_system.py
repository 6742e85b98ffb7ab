"""The system sampler and system info, against real processes, memory and threads."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import math
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading
import time
from itertools import pairwise
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import psutil
import pytest

import speedlab.measure.reading
import speedlab.measure.system
from speedlab.measure.machine import (
    format_bytes,
    format_system_info,
    system_info,
    usable_cores,
    visible_gpus,
)
from speedlab.measure.reading import Reader
from speedlab.measure.system import SystemSample, SystemSampler, summarize
from speedlab.results.system import SystemSummary

FORK = multiprocessing.get_context("fork")
REPO = Path(speedlab.measure.system.__file__).resolve().parents[2]


def burn_cpu(cpu_s: float) -> None:
    """Keep one core busy until this process has used `cpu_s` seconds of CPU."""
    end = time.process_time() + cpu_s
    while time.process_time() < end:
        pass


def hold_memory(nbytes: int, ready: Event, release: Event) -> None:
    block = b"x" * nbytes  # written, so the pages are resident
    ready.set()
    release.wait(30)
    assert len(block) == nbytes


def test_a_busy_worker_counts_as_workers_cpu_not_main() -> None:
    with SystemSampler() as sampler:
        worker = FORK.Process(target=burn_cpu, args=(1.0,))
        worker.start()
        worker.join()
    summary = sampler.stop()
    # The worker burned 1 s of CPU: that, over however long the machine took to give it.
    assert worker_cpu_s(summary) == pytest.approx(1.0, abs=0.15)
    assert summary.main_cpu_percent * summary.duration_s / 100 < 0.25
    assert summary.peak_workers >= 1
    assert summary.cpu_percent * summary.cores > 50  # the busy core shows machine-wide too
    assert len(summary.cpu_percent_per_core) == summary.cores
    assert summary.usable_cores == usable_cores()  # kept with the run, for reading elsewhere


def test_a_worker_that_lives_and_dies_between_samples_still_counts() -> None:
    # With a long interval only the start and stop samples exist: the worker is never seen
    # alive, so its CPU time is only visible once it has been reaped.
    with SystemSampler(interval_s=60) as sampler:
        worker = FORK.Process(target=burn_cpu, args=(0.6,))
        worker.start()
        worker.join()
    summary = sampler.stop()
    assert summary.samples == 2
    assert worker_cpu_s(summary) == pytest.approx(0.6, abs=0.1)  # what it burned, seen at stop
    assert summary.peak_workers == 0


def test_a_worker_first_seen_at_stop_counts_from_its_birth() -> None:
    ready, release = FORK.Event(), FORK.Event()
    worker = FORK.Process(target=_burn_then_wait, args=(0.6, ready, release))
    try:
        with SystemSampler(interval_s=60) as sampler:
            worker.start()
            assert ready.wait(30)
        summary = sampler.stop()
    finally:
        release.set()
        worker.join()
    assert summary.peak_workers >= 1
    assert worker_cpu_s(summary) == pytest.approx(0.6, abs=0.1)


def worker_cpu_s(summary: SystemSummary) -> float:
    """The CPU seconds the workers used, from the sampler's share: a known answer however long a
    busy machine took to give a worker its CPU (0.6 s took 1.25 s beside other tests)."""
    return summary.workers_cpu_percent * summary.duration_s / 100


def _burn_then_wait(cpu_s: float, ready: Event, release: Event) -> None:
    burn_cpu(cpu_s)
    ready.set()
    release.wait(30)


@pytest.mark.parametrize("thread_ends", [False, True])
def test_a_worker_forked_by_another_thread_is_seen(thread_ends: bool) -> None:
    """The sampler reads its Python threads' children: a worker forked by a thread that is
    not the one that started it counts, and still does once that thread has ended (the
    kernel hands its children to the main thread)."""
    ready, release, forked, done = FORK.Event(), FORK.Event(), threading.Event(), threading.Event()
    worker = FORK.Process(target=_burn_then_wait, args=(0.3, ready, release))

    def fork() -> None:
        worker.start()
        forked.set()
        if not thread_ends:
            done.wait(30)

    thread = threading.Thread(target=fork)
    try:
        with SystemSampler(interval_s=60) as sampler:
            thread.start()
            assert forked.wait(30) and ready.wait(30)
            if thread_ends:
                thread.join()
        summary = sampler.stop()
    finally:
        release.set()
        done.set()
        thread.join()
        worker.join()
    assert summary.peak_workers == 1
    assert worker_cpu_s(summary) == pytest.approx(0.3, abs=0.1)


def test_rss_includes_a_worker_holding_200_mb() -> None:
    nbytes = 200 * 2**20
    main_rss = psutil.Process().memory_info().rss
    ready, release = FORK.Event(), FORK.Event()
    worker = FORK.Process(target=hold_memory, args=(nbytes, ready, release))
    try:
        with SystemSampler() as sampler:
            worker.start()
            assert ready.wait(30)
            time.sleep(0.3)
        summary = sampler.stop()
    finally:
        release.set()
        worker.join()
    assert summary.peak_rss_bytes > main_rss + 0.9 * nbytes
    assert sampler.samples[0].rss_bytes < main_rss + 0.5 * nbytes  # before the worker started


def read_shared(block: bytearray, ready: Event, release: Event) -> None:
    assert sum(block[::4096]) == 0  # reads every page the main process wrote: shared, not copied
    ready.set()
    release.wait(30)


def test_pages_workers_share_with_the_main_process_count_once() -> None:
    """Forked workers that read a 200 MB block of the main process map its pages (each one's RSS
    includes them) but share them: the machine holds the block once, and so does the figure."""
    nbytes = 200 * 2**20
    block = bytearray(nbytes)  # zero-filled and written, so resident in this process
    main_rss = psutil.Process().memory_info().rss
    ready = [FORK.Event() for _ in range(3)]
    release = FORK.Event()
    workers = [FORK.Process(target=read_shared, args=(block, r, release)) for r in ready]
    try:
        with SystemSampler() as sampler:
            for worker in workers:
                worker.start()
            assert all(r.wait(30) for r in ready)
            time.sleep(0.3)
            summed = sum(psutil.Process(w.pid).memory_info().rss for w in workers)
        summary = sampler.stop()
    finally:
        release.set()
        for worker in workers:
            worker.join()
    assert summed > 3 * 0.9 * nbytes  # adding the workers' RSS would count the block 4 times
    assert main_rss < summary.peak_rss_bytes < main_rss + 0.5 * nbytes
    assert summary.memory_note is None


def test_where_a_workers_own_pages_cannot_be_read_the_figure_says_it_overcounts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(speedlab.measure.reading, "unique_bytes", lambda pid: None)
    with SystemSampler() as sampler:
        worker = FORK.Process(target=burn_cpu, args=(0.3,))
        worker.start()
        worker.join()
    summary = sampler.stop()
    assert summary.memory_note == speedlab.measure.system.OVERCOUNTED


def test_workers_own_pages_are_read_in_turn_within_their_share_of_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A page walk of a known 5 ms: while the workers run, one is read at a time, the one read
    longest ago, and the walks take at most PAGE_WALK_SHARE of the time (the next waits 0.5 s);
    the reading at stop reads all three."""
    walk_s, own, walks = 0.005, 300 * 2**20, []

    def timed_walk(pid: int) -> int:
        walks.append((time.perf_counter(), pid))
        time.sleep(walk_s)
        return own

    monkeypatch.setattr(speedlab.measure.reading, "unique_bytes", timed_walk)
    release = FORK.Event()
    workers = [FORK.Process(target=release.wait, args=(30,)) for _ in range(3)]
    try:
        with SystemSampler(interval_s=0.05) as sampler:
            for worker in workers:
                worker.start()
            time.sleep(2.0)
        summary = sampler.stop()
    finally:
        release.set()
        for worker in workers:
            worker.join()
    pids = sorted(w.pid for w in workers)
    during, at_stop = walks[:-3], [pid for _, pid in walks[-3:]]
    assert sorted(at_stop) == pids  # the stop's reading walks each worker once
    assert len(during) >= 2
    gap = walk_s / speedlab.measure.reading.PAGE_WALK_SHARE
    assert all(b - a >= gap for (a, _), (b, _) in pairwise(during))  # within the share
    order = [pid for _, pid in during]
    assert set(order) <= set(pids) and len(set(order[:3])) == min(3, len(order))
    assert order[3:] == order[: len(order) - 3]  # in turn, the one read longest ago next
    assert summary.peak_rss_bytes > 3 * own  # every worker's own bytes, counted at stop


def test_children_older_than_the_run_are_not_its_workers() -> None:
    nbytes = 200 * 2**20
    ready, release = FORK.Event(), FORK.Event()
    older = FORK.Process(target=hold_memory, args=(nbytes, ready, release))
    older.start()
    try:
        assert ready.wait(30)
        with SystemSampler(interval_s=60) as sampler:
            release.set()  # the older child exits and is reaped during the run
            older.join()
            worker = FORK.Process(target=burn_cpu, args=(0.3,))
            worker.start()
            worker.join()
        summary = sampler.stop()
    finally:
        release.set()
        older.join()
    assert summary.peak_workers == 0
    assert summary.peak_rss_bytes < psutil.Process().memory_info().rss + 0.5 * nbytes
    assert 0.2 < summary.workers_cpu_percent * summary.duration_s / 100 < 0.5  # the new one only


@pytest.mark.parametrize("busy", [True, False])
def test_the_training_threads_own_cpu_is_measured(busy: bool) -> None:
    # A thread that starts the sampler and then spins (or sleeps) while another thread of the
    # process hashes (without the GIL): only its own CPU counts as the training thread's.
    other_stop = threading.Event()
    block = bytes(4 * 2**20)

    def hash_until_stopped() -> None:
        while not other_stop.is_set():
            hashlib.sha256(block).digest()

    other = threading.Thread(target=hash_until_stopped)
    results: list[SystemSummary] = []

    spent: list[tuple[float, float]] = []  # (this thread's CPU seconds, the process's)

    def train() -> None:
        thread, process = time.thread_time(), time.process_time()
        with SystemSampler() as sampler:
            end = time.perf_counter() + 0.8
            while time.perf_counter() < end:
                if not busy:
                    time.sleep(0.01)
        spent.append((time.thread_time() - thread, time.process_time() - process))
        results.append(sampler.stop())

    other.start()
    try:
        worker = threading.Thread(target=train)
        worker.start()
        worker.join()
    finally:
        other_stop.set()
        other.join()
    (summary,) = results
    if summary.train_thread_cpu_percent is None:
        pytest.skip("the OS does not report a thread's CPU time")
    # Against the CPU the threads got, measured by their own clocks (a busy machine gives less).
    ((thread_s, process_s),) = spent
    seconds = summary.duration_s / 100
    assert summary.train_thread_cpu_percent * seconds == pytest.approx(thread_s, abs=0.1)
    if busy:
        assert thread_s > 0.2  # it spun
    else:
        assert summary.train_thread_cpu_percent < 20
        # The other thread's hashing is the process's, not the training thread's.
        assert summary.main_cpu_percent * seconds == pytest.approx(process_s, abs=0.15)
        assert process_s - thread_s > 0.2


def test_cpu_figures_since_a_moment_leave_out_the_time_before_it() -> None:
    """A thread spins 0.6 s of its own CPU time, then sleeps 0.8 s: its CPU since the sleep
    began is the sleep's; the peaks still cover every sample, and a moment after the last
    sample means all of them. The truth is the thread's own CPU clock: a spin of 0.6 s on the
    wall clock read 30.0% against a bound of 30 in CI, where the edge venvs' suites and the XLA
    suite run side by side and the thread did not have a core for all of it (beside three
    spinning processes here, 0.6 s of the thread's CPU took 1.2 s, and the sampler read the
    truth to 0.5%)."""
    with SystemSampler() as sampler:
        spun = time.thread_time()
        while time.thread_time() < spun + 0.6:
            pass
        spun = time.thread_time() - spun
        since = time.perf_counter()
        time.sleep(0.8)
    whole, after = sampler.summary(), sampler.summary(since)
    if whole.train_thread_cpu_percent is None:
        pytest.skip("the OS does not report a thread's CPU time")
    truth = 100 * spun / whole.duration_s
    assert whole.train_thread_cpu_percent == pytest.approx(truth, abs=5)
    assert after.train_thread_cpu_percent < 10
    assert after.main_cpu_percent < 10 < whole.main_cpu_percent
    assert (after.peak_rss_bytes, after.samples) == (whole.peak_rss_bytes, whole.samples)
    assert sampler.summary(time.perf_counter()) == whole


def sample(t: float, thread: float | None) -> SystemSample:
    """A reading at ``t`` whose interval kept the training thread ``thread`` percent busy."""
    return SystemSample(
        t, thread, [thread or 0.0], None, thread, 0.0, 1, 0, None, 1, None, None, thread
    )


def test_a_window_its_samples_hardly_cover_takes_every_interval() -> None:
    """Steady steps shorter than the sampler's interval: the one interval that starts in them
    ends with the stop's reading 0.02 s later (the fit's teardown): every interval counts."""
    samples = [sample(0.0, None), sample(0.25, 100.0), sample(0.5, 100.0), sample(0.52, 0.0)]
    assert summarize(samples, 1, since=0.3) == summarize(samples, 1)
    assert summarize(samples, 1).train_thread_cpu_percent == pytest.approx(50 / 0.52)
    # from 0.25 on, the intervals cover the whole window
    assert summarize(samples, 1, since=0.25).train_thread_cpu_percent == pytest.approx(25 / 0.27)


def test_samples_arrive_at_about_4_hz() -> None:
    with SystemSampler() as sampler:
        time.sleep(1.0)
    times = [s.t for s in sampler.samples]
    gaps = sorted(b - a for a, b in pairwise(times))
    assert 5 <= len(times) <= 8  # start, about four in between, stop
    assert 0.2 < gaps[len(gaps) // 2] < 0.35
    assert all(a < b for a, b in pairwise(times))


def test_no_thread_left_when_the_body_raises() -> None:
    with pytest.raises(ZeroDivisionError), SystemSampler() as sampler:
        assert any(t.name == "speedlab-system-sampler" for t in threading.enumerate())
        1 / 0  # noqa: B018
    assert not any(t.name == "speedlab-system-sampler" for t in threading.enumerate())
    assert sampler.stop().samples >= 2


def test_a_very_short_run_has_a_valid_summary() -> None:
    start = time.perf_counter()
    with SystemSampler() as sampler:
        pass
    assert time.perf_counter() - start < 0.1
    summary = sampler.stop()
    assert summary.samples == 2
    assert summary.peak_rss_bytes > 10 * 2**20
    assert summary.cores == psutil.cpu_count()
    for value in (summary.cpu_percent, summary.main_cpu_percent, summary.workers_cpu_percent):
        assert math.isfinite(value) and value >= 0
    assert 0 <= summary.cpu_percent <= 100
    assert json.loads(json.dumps(summary.to_dict())) == summary.to_dict()
    assert SystemSummary(**summary.to_dict()) == summary


def test_lifecycle() -> None:
    sampler = SystemSampler()
    assert sampler.latest() is None
    with pytest.raises(RuntimeError, match="before start"):
        sampler.stop()
    sampler.start()
    with pytest.raises(RuntimeError, match="already"):
        sampler.start()
    first = sampler.latest()
    assert first is not None and first.cpu_percent is None  # no interval yet
    time.sleep(0.3)
    latest = sampler.latest()
    assert latest is not None and latest.cpu_percent is not None
    summary = sampler.stop()
    count = len(sampler.samples)
    assert sampler.stop() == summary and len(sampler.samples) == count
    assert sampler.samples[-1].t > latest.t  # the final sample at stop
    with pytest.raises(ValueError, match="interval_s"):
        SystemSampler(interval_s=0)


def test_torch_threads_are_read_once_torch_is_imported() -> None:
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with SystemSampler() as sampler:
            pass
    finally:
        torch.set_num_threads(threads)
    assert sampler.stop().torch_threads == 1


def installed(package: str) -> str | None:
    """The installed version of ``package``; None where it is not installed (the edge runs of
    `make test` have no torch)."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def test_nothing_imports_torch() -> None:
    code = """
        import json, sys
        from speedlab.measure.machine import system_info
        from speedlab.measure.system import SystemSample, SystemSampler, summarize
        info = system_info()
        with SystemSampler() as sampler:
            pass
        summary = sampler.stop()
        print(json.dumps([info, summary.torch_threads, summary.gpu_util_percent,
                          sorted(m for m in ("torch", "lightning", "torch_xla")
                                 if m in sys.modules)]))
        """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    info, torch_threads, gpu_util, imported = json.loads(out)
    assert imported == []
    assert torch_threads is None and gpu_util is None
    assert info["torch"] == installed("torch") and info["lightning"] == installed("lightning")
    assert info["gpus"] == [] and info["cuda"] is None
    # On Linux without NVML nor torch imported: no accelerator, and torch_xla, where it is
    # installed, is only named, never imported.
    xla = importlib.util.find_spec("torch_xla") is not None
    assert [(a["type"], a["count"]) for a in info["accelerators"]] == [("xla", None)] * xla
    assert info["torch_cpu_capability"] is None  # torch's own answer needs torch imported
    assert set(info["cpu_math"]) == {"avx512", "bf16", "amx"}


def test_system_info_says_what_reduced_precision_math_the_cpu_has(fake_cpu_flags) -> None:
    fake_cpu_flags("avx512f avx512_bf16 amx_tile amx_bf16 amx_int8")
    info = system_info()
    assert info["cpu_math"] == {"avx512": True, "bf16": True, "amx": True}
    assert "\nCPU math           AVX-512 yes, bf16 yes, AMX yes" in format_system_info(info)
    fake_cpu_flags("avx512f")
    text = format_system_info(system_info())
    assert "CPU math           AVX-512 yes, bf16 no (no avx512_bf16 or amx_bf16), AMX no" in text
    fake_cpu_flags(None)
    assert "CPU math           unknown (no x86 flags in /proc/cpuinfo)" in format_system_info(
        system_info()
    )


def test_with_torch_imported_the_system_says_which_kernels_torch_uses() -> None:
    torch = pytest.importorskip("torch")
    info = system_info()
    assert info["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert f"; torch's CPU kernels use {info['torch_cpu_capability']}" in format_system_info(info)


class FakeNvml:
    """pynvml as NVML answers it on a machine with one H100 and one T4."""

    class NVMLError(Exception):
        pass

    GPUS = (("NVIDIA H100 80GB HBM3", 80 * 2**30, (9, 0)), (b"Tesla T4", 15 * 2**30, (7, 5)))

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.GPUS)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, i: int) -> str | bytes:
        return self.GPUS[i][0]

    def nvmlDeviceGetMemoryInfo(self, i: int) -> object:
        return type("Memory", (), {"total": self.GPUS[i][1], "used": 0})()

    def nvmlDeviceGetCudaComputeCapability(self, i: int) -> tuple[int, int]:
        return self.GPUS[i][2]


def test_each_gpu_is_described_with_its_memory_and_compute_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    info = system_info()
    assert info["gpus"] == [
        {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * 2**30, "capability": [9, 0]},
        {"name": "Tesla T4", "memory_bytes": 15 * 2**30, "capability": [7, 5]},
    ]
    json.dumps(info)
    text = format_system_info(info)
    assert (
        "\nAccelerators       CUDA: NVIDIA H100 80GB HBM3, 80.0 GiB, compute capability 9.0 "
        "(bf16 and TF32 native)\n                   CUDA: Tesla T4, 15.0 GiB, compute capability "
        "7.5 (fp16 tensor cores, no native bf16 or TF32)\n"
    ) in text


def test_without_nvml_the_gpus_details_come_from_torch_once_cuda_has_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Asking torch for a GPU's capability starts CUDA, after which forked DataLoader workers
    cannot use it: before CUDA has started only the count is told."""
    from types import SimpleNamespace

    import speedlab.measure.machine as machine

    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    props = SimpleNamespace(name="NVIDIA A100", total_memory=40 * 2**30, major=8, minor=0)
    started = False
    cuda = SimpleNamespace(
        device_count=lambda: 1,
        is_initialized=lambda: started,
        get_device_properties=lambda i: props,
    )
    torch = SimpleNamespace(cuda=cuda)
    assert machine._gpus(torch) == [{"name": "CUDA GPU", "memory_bytes": None, "capability": None}]
    started = True
    assert machine._gpus(torch) == [
        {"name": "NVIDIA A100", "memory_bytes": 40 * 2**30, "capability": [8, 0]}
    ]


def test_system_info_describes_this_machine() -> None:
    info = system_info()
    assert info["cores_logical"] == psutil.cpu_count()
    assert 1 <= info["cores_usable"] <= info["cores_logical"]
    assert info["ram_total_bytes"] >= info["ram_available_bytes"] > 0
    assert info["python"] == ".".join(map(str, sys.version_info[:3]))
    assert info["start_method"] in multiprocessing.get_all_start_methods()
    if os.path.isdir("/dev/shm"):
        assert info["shm_total_bytes"] >= info["shm_free_bytes"] >= 0
    json.dumps(info)
    text = format_system_info(info)
    assert f"{info['cores_logical']} logical" in text
    assert info["python"] in text and info["start_method"] in text
    assert (info["torch"] or "not installed") in text


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (None, 0, 1023, 1536, 200 * 2**20, 3 * 2**30)] == [
        "n/a",
        "0 B",
        "1023 B",
        "1.5 KiB",
        "200.0 MiB",
        "3.0 GiB",
    ]


@pytest.mark.parametrize(
    ("env", "expected"),
    [(None, [0, 1, 2, 3]), ("", []), ("2,0", [2, 0]), ("1,7", [1]), ("GPU-3f2a", [0, 1, 2, 3])],
)
def test_visible_gpus(monkeypatch: pytest.MonkeyPatch, env: str | None, expected: list) -> None:
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert visible_gpus(4) == expected


@pytest.mark.gpu
def test_gpu_utilisation_and_memory_are_sampled() -> None:
    pytest.importorskip("pynvml")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    with SystemSampler() as sampler:
        x = torch.randn(4096, 4096, device="cuda")
        end = time.perf_counter() + 1.0
        while time.perf_counter() < end:
            x = x @ x
            x /= x.norm()
        torch.cuda.synchronize()
    summary = sampler.stop()
    assert summary.gpu_util_percent is not None and summary.gpu_util_percent > 0
    assert summary.gpu_mem_peak_bytes is not None and summary.gpu_mem_peak_bytes > 64 * 2**20
    gpus = system_info()["gpus"]
    assert gpus and gpus[0]["memory_bytes"] > 0
    assert gpus[0]["capability"] == list(torch.cuda.get_device_capability(0))


def test_a_long_run_is_read_less_often_after_its_start(monkeypatch) -> None:
    """Each reading costs the training thread (``SLOW_AFTER_S``): the sampler keeps its
    interval for a run's start, then reads at the slow interval."""
    monkeypatch.setattr(speedlab.measure.system, "SLOW_AFTER_S", 0.6)
    monkeypatch.setattr(speedlab.measure.system, "SLOW_INTERVAL_S", 0.3)
    with SystemSampler(interval_s=0.05) as sampler:
        time.sleep(1.8)
    t = [s.t - sampler.samples[0].t for s in sampler.samples[:-1]]  # the last is stop()'s
    gaps = [b - a for a, b in pairwise(t)]
    early = [g for g, at in zip(gaps, t[1:]) if at <= 0.55]
    late = [g for g, at in zip(gaps, t[1:]) if at >= 0.9]
    assert len(early) >= 8 and max(early) < 0.2, early
    assert 3 <= len(late) <= 4 and min(late) > 0.25, late


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Each reading as it is taken: its thread's name and whether it could walk pages."""
    read, readings = Reader.read, []

    def recorded(self: Reader, every_worker: bool = False, walk: bool = True) -> SystemSample:
        readings.append((threading.current_thread().name, walk))
        return read(self, every_worker, walk)

    monkeypatch.setattr(Reader, "read", recorded)
    return readings


def train_for(sampler: SystemSampler, seconds: float, step_s: float = 0.002) -> None:
    """The training path's part: steps of ``step_s``, each ending with a due reading."""
    end, due = time.perf_counter() + seconds, sampler.path_due()
    while (now := time.perf_counter()) < end:
        time.sleep(step_s)
        if now >= due[0]:
            sampler.read_if_due()


def test_the_thread_that_trains_takes_the_due_readings_between_its_steps(
    taken: list[tuple[str, bool]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Steps of 2 ms take each due reading, in the sampler's rhythm; the sampler's thread
    takes none but the first (asleep until it was due when the path came), and walks the
    worker's pages, which no step waits for."""
    walks: list[str] = []

    def walk(pid: int) -> int:
        walks.append(threading.current_thread().name)
        return 2**20

    monkeypatch.setattr(speedlab.measure.reading, "unique_bytes", walk)
    release = FORK.Event()
    worker = FORK.Process(target=release.wait, args=(30,))
    try:
        with SystemSampler(interval_s=0.1) as sampler:
            worker.start()
            train_for(sampler, 1.5)
    finally:
        release.set()
        worker.join()
    main = threading.main_thread().name
    during = taken[2:-1]  # the start's reading, the first due one and the stop's apart
    assert len(during) >= 10 and set(during) == {(main, False)}, taken
    gaps = sorted(b.t - a.t for a, b in pairwise(sampler.samples[1:-1]))
    assert 0.09 < gaps[len(gaps) // 2] < 0.13
    assert walks and set(walks[:-1]) == {"speedlab-system-sampler"}  # the last: stop()'s


def test_readings_no_step_comes_to_take_are_the_sampler_threads(
    taken: list[tuple[str, bool]],
) -> None:
    """In a long step (1 s) the sampler's thread reads, each reading at most LATE_SHARE of an
    interval late; the steps after it take them again."""
    with SystemSampler(interval_s=0.1) as sampler:
        train_for(sampler, 0.5)
        before = len(taken)
        time.sleep(1.0)
        stalled = taken[before:]
        train_for(sampler, 0.5)
        after = taken[len(taken) - 2 :]
    late = (1 + speedlab.measure.system.LATE_SHARE) * 0.1
    assert len(stalled) >= 1.0 / late - 1
    assert set(stalled) == {("speedlab-system-sampler", True)}
    assert set(after) == {(threading.main_thread().name, False)}


def test_a_reading_that_fails_on_the_training_path_leaves_the_readings_to_the_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fit sees the sampler's error as a warning, once: its path stops reading, the
    sampler's thread reads on."""
    read = Reader.read

    def fails_on_the_path(self: Reader, every_worker: bool = False, walk: bool = True) -> Any:
        if not walk:
            raise OSError("no /proc here")
        return read(self, every_worker, walk)

    monkeypatch.setattr(Reader, "read", fails_on_the_path)
    with SystemSampler(interval_s=0.05) as sampler:
        with pytest.warns(RuntimeWarning, match=r"OSError\('no /proc here'\).* own thread") as seen:
            train_for(sampler, 0.2)
        assert len(seen) == 1
        assert sampler.path_due() == [math.inf]
        count = len(sampler.samples)
        time.sleep(0.3)
        assert len(sampler.samples) >= count + 3
