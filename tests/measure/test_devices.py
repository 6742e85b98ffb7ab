"""speedlab.measure.devices: the registry that gives each device type its device, and the probe
that asks it, checked on a simulated asynchronous device registered as the CPU's (the real CUDA
path runs in the gpu-marked tests)."""

from __future__ import annotations

import ast
import csv
import inspect
import itertools
import statistics
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch

import speedlab.measure.probe
from speedlab.labs import QUIET_TRAINER, KnownCostDataset, known_cost_loader
from speedlab.measure import devices
from speedlab.measure.devices import (
    DEVICES,
    CpuDevice,
    CudaDevice,
    Device,
    MpsDevice,
    PlainDevice,
    XlaDevice,
    available_devices,
    default_device,
    device_for,
    memory_reserved,
)
from speedlab.measure.devices.events import READ_EVERY_S, READ_EVERY_STEPS, EventTimeline
from speedlab.measure.probe import SpeedProbe
from speedlab.results.run import RunResult
from tests.doctor_runs import require_quiet
from tests.simulated_device import (
    STEP_S,
    OnDevice,
    SimulatedDevice,
    SynchronisedTruth,
    device_work,
    fit_on_device,
    on_device,
    probe_on_simulated_device,
)


@pytest.mark.parametrize(
    ("type_name", "kind", "name", "asynchronous", "pins_memory"),
    [
        ("cpu", CpuDevice, "cpu", False, False),
        ("cuda", CudaDevice, "GPU", True, True),
        ("mps", MpsDevice, "GPU", True, False),
        ("xla", XlaDevice, "TPU", True, False),
        ("hpu", PlainDevice, "hpu", False, False),  # unknown: synchronous, named by its type
    ],
)
def test_each_device_type_gets_its_device(
    type_name: str, kind: type[Device], name: str, asynchronous: bool, pins_memory: bool
) -> None:
    device = device_for(type_name)
    assert type(device) is kind and device.type == type_name and device.name == name
    assert (device.asynchronous, device.pins_memory) == (asynchronous, pins_memory)


@pytest.mark.parametrize("type_name", [*DEVICES, "hpu"])
def test_a_device_has_a_timeline_exactly_when_it_is_asynchronous(type_name: str) -> None:
    device = device_for(type_name)  # CUDA's timeline makes no event until a step is marked
    assert (device.timeline(5) is not None) == device.asynchronous


def test_the_cpu_is_the_last_choice_and_always_there() -> None:
    assert list(DEVICES)[-1] == "cpu"
    assert type(available_devices()[-1]) is CpuDevice


@pytest.mark.parametrize(("cuda", "chosen"), [(True, CudaDevice), (False, CpuDevice)])
def test_a_run_trains_on_the_first_available_device_by_default(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, chosen: type[Device]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert type(default_device()) is chosen
    assert [type(d) for d in available_devices()] == [CudaDevice, CpuDevice][not cuda :]


class Holds(PlainDevice):
    def __init__(self, type_name: str, held: int | None) -> None:
        super().__init__(type_name)
        self.held = held

    def memory_reserved(self) -> int | None:
        return self.held


def test_memory_is_summed_over_the_devices_that_tell(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "DEVICES", {"a": lambda: Holds("a", None)})
    assert memory_reserved() is None
    monkeypatch.setitem(devices.DEVICES, "b", lambda: Holds("b", 2**20))
    monkeypatch.setitem(devices.DEVICES, "c", lambda: Holds("c", 3))
    assert memory_reserved() == 2**20 + 3


def test_a_new_device_is_a_registry_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(devices.DEVICES, "npu", lambda: PlainDevice("npu", name="NPU"))
    assert device_for("npu").name == "NPU"


def test_the_probe_names_no_device() -> None:
    """The probe asks ``device_for``: it compares nothing with a device type, and CUDA appears
    nowhere in it."""
    source = inspect.getsource(speedlab.measure.probe)
    compared = {
        node.value
        for compare in ast.walk(ast.parse(source))
        if isinstance(compare, ast.Compare)
        for node in ast.walk(compare)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert compared.isdisjoint([*DEVICES, "gpu", "GPU"])
    assert "cuda" not in source.lower()


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


def timed_samples(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The seconds each sample of ``KnownCostDataset`` took to load in this process: the truth
    for the host's wait, as the OS wakes a sleeper late (2.5 ms samples took 2.7 ms here)."""
    spent: list[float] = []
    load = KnownCostDataset.__getitem__

    def timed(self: KnownCostDataset, i: int) -> tuple[torch.Tensor, int]:
        start = time.perf_counter()
        sample = load(self, i)
        spent.append(time.perf_counter() - start)
        return sample

    monkeypatch.setattr(KnownCostDataset, "__getitem__", timed)
    return spent


def host_pace(result: RunResult) -> float:
    """The host's step, from its steps' origins (``t``), over the steps the run's figures keep,
    by their rule: a mean, pauses left out. A median would leave out the steps a busy host woke
    late in, which the figures keep: beside the host's steal, a median's pace read the device's
    idle at 0.9 ms a step where the figures read 4.5, and 13.6 where they read 18.4
    (2026-12-02)."""
    t = result.records["t"]
    return statistics.fmean(t[i + 1] - t[i] for i in result.steady.steps if i + 1 < len(t))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_throughput_follows_the_devices_timeline(
    device: SimulatedDevice, workload: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60-step runs: samples/s within 3% of the synchronised truth, whether the device, the
    loader or neither limits training; the host's wait for the loader is kept apart from the
    time the device sat idle for want of input."""
    work_s, sleep_s = WORKLOADS[workload]
    probe = SpeedProbe(warmup=5)
    truth = SynchronisedTruth(device.synchronize, first=5)
    spent = timed_samples(monkeypatch)
    fit_on_device(on_device(device, work_s=work_s), probe, 60, truth, sleep_s=sleep_s)
    result = probe.result()
    assert result.samples_per_s == pytest.approx(truth.samples_per_s, rel=0.03)
    # The simulated device's thread needs a core to stamp its events in time.
    require_quiet(result)
    # The device's span of a step: its work, and any time it waited for the host to queue the
    # rest of the step (none where the host runs ahead of it).
    work = statistics.median(device.worked)
    assert result.batch_time > 0.95 * work
    # The batches the steady steps waited for (one fetched ahead), 8 samples each: the wait
    # is their loading and the collation, far from loading and the device's work.
    loading = statistics.mean(sum(spent[i : i + 8]) for i in range(6 * 8, len(spent), 8))
    assert loading >= 8 * sleep_s
    assert loading - 0.0005 <= result.host_data_time < loading + min(work_s, 0.003)
    # The device idles for want of input only where the host's pace is slower than its work:
    # the loader's time is hidden otherwise (a busy machine can slow the host that much).
    assert result.data_time == pytest.approx(
        max(0.0, host_pace(result) - result.batch_time), abs=0.003
    )
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


def test_a_steady_step_records_four_events_in_the_devices_queue(device: SimulatedDevice) -> None:
    """On a GPU the training path's cost is mostly its events: a fetch's start and end and the
    training batch's start and end, one each a step, by two fit lengths' difference."""
    recorded = []
    for steps in (12, 24):
        before = len(device.waits)  # one stamp each event the device reached
        fit_on_device(
            on_device(device, work_s=0.0), SpeedProbe(warmup=2, sample_system=False), steps
        )
        recorded.append(len(device.waits) - before)
    assert recorded[1] - recorded[0] == 4 * 12


def test_a_fits_device_timeline_is_read_on_the_way_at_most_64_steps_apart(
    device: SimulatedDevice,
) -> None:
    """The probe reads the device's events during the fit (the live view's figures, the pool of
    events recorded again), no more often than its schedule (``Timeline.due``) says."""
    readings: list[tuple[int, bool]] = []  # (steps so far, waited)

    class Read(EventTimeline):
        def resolve(self, records: dict[str, list], *, wait: bool = False) -> None:
            readings.append((len(records["batch_time"]), wait))
            super().resolve(records, wait=wait)

    device.timeline = lambda warmup=0: Read(device.event, device.synchronize)
    started = time.perf_counter()
    fit_on_device(on_device(device, work_s=0.0), SpeedProbe(warmup=2, sample_system=False), 300)
    seconds = time.perf_counter() - started
    during = [steps for steps, waited in readings if not waited]
    assert readings[-1] == (300, True)  # and once more at the end, after a synchronisation
    assert during[0] == 1
    assert max(b - a for a, b in itertools.pairwise([*during, 300])) <= READ_EVERY_STEPS
    assert len(during) <= 1 + 300 / READ_EVERY_STEPS + seconds / READ_EVERY_S


class SyncsEveryFourthStep(OnDevice):
    """Waits for the device every fourth step, as a ``loss.item()`` every few steps does: the
    host runs up to four steps ahead of the device's queue."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if batch_idx % 4 == 3:
            self.simulated.synchronize()
        return loss


def test_the_loggers_and_the_live_view_get_the_devices_figures_not_the_hosts(
    device: SimulatedDevice, tmp_path: Path
) -> None:
    """The loader's 12 ms a batch overlaps the device's 20 ms of work: the host's batch_time is
    what is left of its step, well under the device's, until the timeline is read. The loggers'
    figures and the steps ``settled`` (the live view's) are the device's."""
    probe = SpeedProbe(warmup=2, log_every_n_steps=10, sample_system=False)
    seen: list[tuple[int, int | None]] = []  # (steps recorded, settled), each step

    class Watch(pl.Callback):
        def on_train_batch_end(self, *args: Any) -> None:
            seen.append((len(probe.records["batch_time"]), probe.settled))

    model = SyncsEveryFourthStep(step_s=0.0)
    model.simulated = device
    logger = pl.loggers.CSVLogger(tmp_path, name="run")
    quiet = {**QUIET_TRAINER, "logger": logger}
    trainer = pl.Trainer(accelerator="cpu", max_steps=60, callbacks=[probe, Watch()], **quiet)
    trainer.fit(model, known_cost_loader(n=800, batch_size=8, sleep_s=0.0015))
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    logged = [float(r["speedlab/batch_time"]) for r in rows if r.get("speedlab/batch_time")]
    assert len(logged) >= 2 and all(0.9 * STEP_S < b < 1.9 * STEP_S for b in logged), logged
    assert all(settled is not None and settled <= steps for steps, settled in seen)
    assert any(settled < steps for steps, settled in seen)  # the host ran ahead
    assert device_work(probe.result().records["batch_time"][2:])


def test_an_error_in_a_device_step_reaches_the_user_unchanged(device: SimulatedDevice) -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    with pytest.raises(RuntimeError, match="step 2 fails") as raised:
        fit_on_device(on_device(device, fail_at=2), probe, 12)
    assert raised.traceback[-1].name == "training_step"  # the user's frame, not ours
    result = probe.result()
    assert len(result.records["batch_time"]) == 2  # the steps before it are kept
    assert device_work(result.records["batch_time"])


class FedTheIterator(OnDevice):
    """Queues the device's work after fetching its own batch from the loader's iterator."""

    def training_step(self, dataloader_iter):
        batch, batch_idx, _ = next(dataloader_iter)
        return super().training_step(batch, batch_idx)


def test_a_step_fetching_inside_idles_the_device_only_for_what_its_queue_does_not_cover(
    device: SimulatedDevice,
) -> None:
    """A step fed the loader's iterator fetches inside its training while the device runs the
    work queued before: the device waits for input only for the rest of the fetch (8 x 3 ms
    of loading against 20 ms of queued work), and its batch_time is its work alone."""
    model = FedTheIterator(step_s=0.0)
    model.simulated = device
    probe = SpeedProbe(warmup=5)
    fit_on_device(model, probe, 30, sleep_s=0.003)
    result = probe.result()
    require_quiet(result)
    steady = [i for i, phase in enumerate(result.records["phase"]) if phase == "steady"]
    assert device_work([result.records["batch_time"][i] for i in steady])
    assert result.host_data_time >= 8 * 0.003
    assert result.data_time == pytest.approx(
        max(0.0, host_pace(result) - result.batch_time), abs=0.003
    )
    assert result.data_time >= 0.002


class ValidatedOnDevice(OnDevice):
    """Queues five steps' work on the device in each of its two validation batches."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.simulated.launch(5 * STEP_S)

    def val_dataloader(self) -> Any:
        return known_cost_loader(n=16, batch_size=8)


def test_epochs_and_validation_on_the_devices_clock_as_on_the_hosts(
    device: SimulatedDevice,
) -> None:
    """Two epochs of ten steps, each validated at its end inside its last step: that step's
    wall on the device's clock leaves out the validation's ten steps of device work. (An
    epoch's first step is not held to a step's length: its wall on the device's clock includes
    the device's idle time while the host ran the fit's one-off first-step work, 45 ms once in
    a full CI run on 2 cores.)"""
    model = ValidatedOnDevice(step_s=0.0)
    model.simulated = device
    probe = SpeedProbe(warmup=2, sample_system=False)
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=2, num_sanity_val_steps=0, callbacks=[probe], **QUIET_TRAINER
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, known_cost_loader(n=80, batch_size=8))
    records = probe.result().records
    assert records["epoch"] == [0] * 10 + [1] * 10
    assert records["phase"][10] == "epoch_start"
    assert device_work(records["batch_time"])
    # Validated in steps 9 and 19: with its work, their walls would be 11 steps of it.
    assert records["wall"][9] < 2 * STEP_S and records["wall"][19] < 2 * STEP_S
    assert all(w >= b for w, b in zip(records["wall"], records["batch_time"], strict=True))
