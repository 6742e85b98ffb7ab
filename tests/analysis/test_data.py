"""speedlab.analysis.data: data-bound runs told apart as CPU-bound or I/O-bound, waits in
bursts, and workers oversubscribing the cores."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import lightning.pytorch as pl
import pytest
import torch

from speedlab.analysis.compare import other_processes_cores, run_cores
from speedlab.analysis.data import CONTENDED_CORES
from speedlab.analysis.doctor import diagnose
from speedlab.labs import KnownCostModel, known_cost_loader
from speedlab.measure.machine import usable_cores
from speedlab.measure.probe import SpeedProbe
from speedlab.results.run import RunResult, empty_records
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import QUIET, kinds, profile, require_quiet, the
from tests.records import run_of
from tests.simulated_device import fit_on_device, on_device, probe_on_simulated_device


def test_image_lab_without_throttle_is_cpu_bound_and_names_workers_and_preload(
    image_sweep: SweepResult,
) -> None:
    base = image_sweep.baseline
    require_quiet(base)
    assert base.data_share > 0.2
    found = the(diagnose(base), "cpu_bound")
    assert found.severity == "critical"
    assert "workers" in found.advice and "--preload ram" in found.advice
    assert "simplejpeg" in found.advice and "Image.draft" in found.advice
    assert f"{base.data_share:.0%} of the step" in found.evidence
    assert (found.knob, found.value) == ("preload", "ram")  # torch uses both cores already
    assert "io_bound" not in kinds(diagnose(base))


def test_throttled_image_lab_is_io_bound_with_or_without_workers(
    throttled_sweep: SweepResult,
) -> None:
    base, workers = throttled_sweep.runs
    require_quiet(base, workers)
    first = the(diagnose(base), "io_bound")
    assert first.severity == "critical"
    assert "workers=0" in first.evidence
    assert (first.knob, first.value) == ("workers", max(2, run_cores(base)))  # waiting is free
    then = the(diagnose(workers), "io_bound")
    assert "The 2 worker(s) used" in then.evidence
    assert (then.knob, then.value) == ("preload", "ram")
    assert "cpu_bound" not in kinds(diagnose(base)) + kinds(diagnose(workers))


def test_waits_in_bursts_count_by_their_average_not_the_median_step() -> None:
    """Workers that cannot keep up hand over batches in turns: 3 of 5 steps find one ready, 2
    wait 50 ms. The median step waits nothing, yet 2 * 50 / (2 * 50 + 5 * 20) = half the time
    goes to waiting."""
    records = empty_records()
    for i in range(40):
        data = 0.050 if i % 5 in (1, 3) else 0.0
        for key, value in (("t", float(i)), ("data_time", data), ("batch_time", 0.020)):
            records[key].append(value)
        records["wall"].append(data + 0.020)
        records["samples"].append(32)
        records["phase"].append("steady")
        records["epoch"].append(0)
    run = RunResult(knobs={"workers": 2}, records=records)
    assert run.steady.typical_share == 0.0
    assert run.data_share == pytest.approx(0.5)
    assert run.data_time == pytest.approx(0.020)
    (finding,) = [f for f in diagnose(run) if f.kind in ("cpu_bound", "io_bound")]
    assert finding.severity == "critical"
    assert (
        "20.0 ms for data on average, in bursts (the typical step waits 0.0 ms)" in finding.evidence
    )
    assert "model_bound" not in kinds(diagnose(run))


def test_too_many_workers_on_two_cores_is_oversubscribed(image_sweep: SweepResult) -> None:
    many = image_sweep.runs[1]
    require_quiet(many)
    found = the(diagnose(many), "oversubscribed")
    threads = many.system.torch_threads
    assert f"4 worker(s) + {threads} torch thread(s) (torch.get_num_threads())" in found.evidence
    assert found.knob == "workers" and found.value < 4
    assert "torch.set_num_threads" in found.advice
    # The same run on a GPU: torch's threads sit idle while the device computes.
    assert "oversubscribed" not in kinds(diagnose(replace(many, device="cuda")))


def test_other_processes_on_the_cores_torchs_threads_compute_on_are_named() -> None:
    """workers=0, 2 torch threads on 2 cores; the machine 100% busy, this run 1.2 cores: other
    processes took 0.8 of them."""
    if usable_cores() < 2:
        pytest.skip("the machine figures below describe 2 cores this process may use")
    run = run_of([0.0002] * 30, [0.004] * 30, warmup=5)
    system = {
        "cores": 2,
        "cpu_percent": 100.0,
        "main_cpu_percent": 120.0,
        "workers_cpu_percent": 0.0,
        "torch_threads": 2,
    }
    run = replace(run, system=system)
    found = the(diagnose(run), "oversubscribed")
    assert "Other processes used about 0.8 of the 2 cores" in found.evidence
    assert "on 2 torch thread(s)" in found.evidence
    assert found.knob is None and "torch.set_num_threads(1) at the top of the cell" in found.advice
    # One thread leaves them a core; a GPU computes while the threads idle; under half a core
    # taken is not a shared machine.
    for other in (
        replace(run, system=replace(run.system, torch_threads=1)),
        replace(run, device="cuda"),
        replace(run, system=replace(run.system, main_cpu_percent=170.0)),
    ):
        assert "oversubscribed" not in kinds(diagnose(other))


def test_busy_processes_beside_torchs_threads_are_measured_and_named() -> None:
    """The known answer: a process spinning on each core this process may use while the cell's
    torch threads use every one of them. (One spinning process got 0.48 to 0.84 cores beside
    the cell's threads on 2 cores, its fair share of the runnable threads: too near the 0.5
    that counts as contended to be an answer; two got 0.90 to 1.05.)"""
    cores = usable_cores()

    def train() -> None:
        torch.set_num_threads(cores)  # put back after the run
        loader = known_cost_loader(n=4000, batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.0), loader)

    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        run = profile(train, steps=80).runs[0]
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    if int(run.system.cores or 0) != run_cores(run):
        pytest.skip("the machine's CPU figures cover more cores than this process may use")
    assert other_processes_cores(run) >= CONTENDED_CORES  # the spinning processes are seen
    found = the(diagnose(run), "oversubscribed")
    assert f"on {cores} torch thread(s)" in found.evidence


def test_idle_loading_on_a_shared_machine_is_not_called_a_wait_for_storage() -> None:
    """workers=0, data 1 ms of a 4 ms step; the training thread is busy only while computing
    (loading idle), and other processes take 0.9 of the 2 cores."""
    if usable_cores() < 2:
        pytest.skip("the machine figures below describe 2 cores this process may use")
    run = run_of([0.001] * 30, [0.003] * 30, warmup=5)
    run = replace(
        run,
        system={
            "cores": 2,
            "cpu_percent": 95.0,
            "main_cpu_percent": 100.0,
            "workers_cpu_percent": 0.0,
            "train_thread_cpu_percent": 75.0,
            "torch_threads": 1,
        },
    )
    (found,) = [f for f in diagnose(run) if f.kind in ("io_bound", "cpu_bound")]
    assert found.kind == "io_bound" and found.severity == "warn" and found.knob is None
    assert "Other processes used about 0.9 of its 2 cores meanwhile" in found.evidence
    assert "cannot tell the two apart" in found.advice
    assert "waits for storage, not for the CPU" not in found.advice
    # the same run on a quiet machine: storage, and a knob
    run = replace(run, system=replace(run.system, cpu_percent=50.0))
    quiet = the(diagnose(run), "io_bound")
    assert quiet.severity == "critical" and quiet.knob == "workers"


def test_a_wait_for_tensors_in_memory_is_cpu_work_never_storage() -> None:
    # The tabular lab's shape: a TensorDataset, a quarter of each step waiting for its batch,
    # the loader looking idle to the sampler (a 0.2 ms wait is shorter than its period).
    run = run_of([0.0002] * 30, [0.0008] * 30, knobs={"workers": 0})
    run = replace(
        run,
        workload={"dataset": "TensorDataset", "loader_workers": 0},
        system={"cores": 2, "main_cpu_percent": 40.0, "train_thread_cpu_percent": 41.0},
    )
    found = the(diagnose(run), "cpu_bound")
    assert "io_bound" not in kinds(diagnose(run))
    assert "tensors in memory (TensorDataset)" in found.evidence
    assert "indexing one row at a time" in found.evidence and "decod" not in found.advice
    assert "BatchSampler" in found.advice and found.knob is None
    assert "Neither --preload ram nor workers removes the per-row overhead" in found.advice


def test_the_tabular_lab_never_gets_storage_or_decoding_advice(
    tabular_sweep: SweepResult,
) -> None:
    run = tabular_sweep.baseline
    assert run.workload["dataset"] == "TensorDataset"
    for found in diagnose(run):
        assert found.kind != "io_bound"
        assert "decod" not in found.advice.lower() and found.value != "ram"


def test_after_preload_shm_decoding_still_runs_and_preload_ram_is_what_removes_it() -> None:
    run = run_of([0.02] * 30, [0.01] * 30, knobs={"workers": 0, "preload": "shm"})
    run = replace(
        run,
        workload={"dataset": "ShapesDataset", "loader_workers": 0},
        system={"cores": 2, "main_cpu_percent": 95.0, "train_thread_cpu_percent": 95.0},
    )
    found = the(diagnose(run), "cpu_bound")
    assert "every step still decodes" in found.advice
    assert (found.knob, found.value) == ("preload", "ram")


@pytest.mark.parametrize(
    ("cache", "said"),
    [
        ("loads", "its load/transform split keeps augmentation running each step"),
        (
            "items",
            "a dataset without a load/transform split is cached whole: a random augmentation "
            "is drawn once, then frozen",
        ),
    ],
)
def test_the_preload_ram_advice_says_whether_augmentation_would_still_run(cache, said) -> None:
    """--preload ram caches decoded loads where the dataset splits load from transform, and
    whole items (augmentation frozen) elsewhere: the advice says which for the run's dataset."""
    run = run_of([0.02] * 30, [0.01] * 30, knobs={"workers": 0})
    run = replace(
        run,
        workload={"dataset": "ImageFolder", "loader_workers": 0, "ram_cache": cache},
        system={"cores": 2, "main_cpu_percent": 95.0, "train_thread_cpu_percent": 95.0},
    )
    found = the(diagnose(run), "cpu_bound")
    assert f"--preload ram decodes every sample once, before training ({said})" in found.advice


@pytest.mark.parametrize(("device", "said"), [("cpu", "fewer torch threads"), ("cuda", "GPU")])
def test_with_no_core_to_spare_after_preloading_the_advice_fits_the_device(device, said) -> None:
    run = replace(decoding(device), knobs={"workers": 0, "preload": "ram"})
    run = replace(run, system={**run.system.to_dict(), "cores": 1, "usable_cores": 1})
    found = the(diagnose(run), "cpu_bound")
    assert (
        found.knob is None and "No knob frees CPU here: a lighter transform would" in found.advice
    )
    assert said in found.advice.rsplit("No knob", 1)[1]


def test_a_pageable_copy_is_its_own_part_not_io_and_pinning_is_suggested() -> None:
    """Batches in memory, each copied from pageable memory behind the device's 20 ms of work: the
    host's wait holds the device's work, the device's own wait is the 5 ms copy and the time
    the host (which waited for the copy) and then the device's thread take to wake and queue
    and reach the step's start: about 0.6 ms a step on this 2-core VM, 1.5 to 4.7 ms where a
    thread woke late (2026-12-02: copies of 5.1 ms read 6.7 to 9.7 ms a step in twelve runs).
    So the copy is told from the 25 ms of copy and work with half the work's margin."""
    with probe_on_simulated_device() as device:
        probe = SpeedProbe(warmup=5)
        fit_on_device(on_device(device, work_s=0.02, copy_s=0.005), probe, 40)
    run = replace(probe.result(), device="cuda")  # its figures are the simulated device's
    require_quiet(run)  # a host slowed by other work no longer runs ahead of the device
    assert run.host_data_time > 0.02  # the copy waited for the previous step's work
    assert 0.005 <= run.copy_time < 0.005 + 0.02 / 2 and run.data_time < run.copy_time + 0.002
    found = the(diagnose(run), "copy_bound")
    assert "is the copy of the batch to the GPU" in found.evidence
    assert (found.knob, found.value) == ("pin_memory", True)
    assert not {"io_bound", "cpu_bound"} & set(kinds(diagnose(run)))
    assert "the copy still runs after the step's earlier kernels" in found.advice
    assert "run beside" not in found.advice  # the copy runs in the step's own stream
    pinned = replace(run, knobs={"pin_memory": True})
    assert the(diagnose(pinned), "copy_bound").knob is None
    apple = the(diagnose(replace(run, device="mps")), "copy_bound")  # unified memory: no pinning
    assert apple.knob is None and "Pinned memory does not act on the GPU's copies" in apple.advice


def decoding(device: str, workers: int = 0) -> RunResult:
    """A run that waits 20 ms a step for decoding in a busy loader, 10 ms computing, with
    torch's 4 threads on 4 cores."""
    run = run_of([0.02] * 30, [0.01] * 30, knobs={"workers": workers})
    return replace(
        run,
        device=device,
        workload={"dataset": "ShapesDataset", "loader_workers": workers},
        system={
            "cores": 4,
            "usable_cores": 4,
            "main_cpu_percent": 95.0,
            "train_thread_cpu_percent": 95.0,
            "torch_threads": 4,
        },
    )


def test_on_a_gpu_torchs_threads_do_not_keep_workers_from_free_cores() -> None:
    """torch's 4 threads fill the 4 cores only where the model computes on them: on a GPU the
    training process keeps about one core busy, so workers get the other three."""
    on_cpu = the(diagnose(decoding("cpu")), "cpu_bound")
    assert "torch computes on 4 thread(s)" in on_cpu.advice
    assert "workers would take CPU from the model" in on_cpu.advice
    assert (on_cpu.knob, on_cpu.value) == ("preload", "ram")
    on_gpu = the(diagnose(decoding("cuda")), "cpu_bound")
    assert "the model computes on the GPU while the training process keeps about one core busy" in (
        on_gpu.advice
    )
    assert "3 core(s) are free" in on_gpu.advice and "torch computes on" not in on_gpu.advice
    assert (on_gpu.knob, on_gpu.value) == ("workers", 3)


def test_the_pinning_advice_says_what_pinning_gives_and_what_it_does_not() -> None:
    """A GPU run whose 5 ms wait for input is all the copy of the batch: pinning makes the copy
    faster and the host free to queue on, but the copy stays in the step's own stream."""
    run = run_of([0.005] * 30, [0.02] * 30)
    run = replace(run, device="cuda", records={**run.records, "copy_time": [0.005] * 30})
    found = the(diagnose(run), "copy_bound")
    assert (found.knob, found.value) == ("pin_memory", True)
    assert "the copy is faster (direct memory access)" in found.advice
    assert "so the host can queue the next work" in found.advice
    assert "the copy still runs after the step's earlier kernels, in the same stream" in (
        found.advice
    )
    assert "needs a separate CUDA stream" in found.advice and "run beside" not in found.advice
