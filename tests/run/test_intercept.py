"""Intercept: knobs applied to unchanged Lightning code, and everything restored afterwards."""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
from pathlib import Path

import lightning.pytorch as pl
import psutil
import pytest
import pytorch_lightning
import torch
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from torch.utils.data import DataLoader, RandomSampler

from speedlab.labs import (
    QUIET_TRAINER,
    KnownCostDataset,
    KnownCostModel,
    ShapesDataset,
    ThrottledOpener,
    make_shapes,
)
from speedlab.measure import devices
from speedlab.measure.dataset import SAMPLES
from speedlab.measure.devices import CpuDevice, default_device
from speedlab.results.knobs import Knobs
from speedlab.run import intercept
from speedlab.run.intercept import Intercept, RunControls, _matmul
from speedlab.run.loaders import (
    NotebookClass,
    NotebookClassError,
    WorkerSetupError,
    rebuild_loader,
    worker_context,
)
from speedlab.run.precision import resolve_precision
from speedlab.run.preload import PreloadError, preload_ram, preload_shm, ram_cache


def collate(batch):
    xs, ys = zip(*batch)
    return torch.stack(xs), torch.tensor(ys)


def fit_known_cost(steps: int = 12, **loader_kw) -> pl.Trainer:
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", **QUIET_TRAINER)
    loader = DataLoader(
        KnownCostDataset(400), batch_size=8, shuffle=True, collate_fn=collate, **loader_kw
    )
    trainer.fit(KnownCostModel(step_s=0.001), loader)
    return trainer


def test_rebuilt_loader_keeps_the_users_choices_and_applies_the_knobs() -> None:
    dataset = KnownCostDataset(100)
    loader = DataLoader(dataset, batch_size=8, shuffle=True, collate_fn=collate, drop_last=True)
    rebuilt = rebuild_loader(
        loader, Knobs(workers=2, persistent_workers=True, batch_size=16), dataset=dataset, devices=1
    )
    new = rebuilt.loader
    assert new.dataset is dataset and new.collate_fn is collate and new.drop_last
    assert isinstance(new.sampler, RandomSampler) and new.sampler is loader.sampler
    assert (new.num_workers, new.persistent_workers, new.batch_size) == (2, True, 16)
    assert rebuilt.notes == () and rebuilt.notebook_class is None


def test_settings_the_hardware_cannot_use_are_noted_not_fatal() -> None:
    dataset = KnownCostDataset(100)
    rebuilt = rebuild_loader(
        DataLoader(dataset, batch_size=8),
        Knobs(workers=0, persistent_workers=True, pin_memory=True),
        dataset=dataset,
        devices=1,
    )
    new, notes = rebuilt.loader, rebuilt.notes
    assert not new.persistent_workers
    assert any("persistent_workers=on does nothing with workers=0" in n for n in notes)
    if not torch.cuda.is_available():
        assert not new.pin_memory
        assert any("pin_memory=on has no effect without a CUDA GPU" in n for n in notes)


def test_workers_auto_resolves_from_cores() -> None:
    dataset = KnownCostDataset(10)
    rebuilt = rebuild_loader(DataLoader(dataset), Knobs(workers="auto"), dataset=dataset, devices=1)
    new, notes = rebuilt.loader, rebuilt.notes
    from speedlab.measure.machine import usable_cores

    assert new.num_workers == max(0, usable_cores() - 1)
    assert "workers=auto resolved to" in notes[0]


NotebookDataset = type("NotebookDataset", (KnownCostDataset,), {"__module__": "__main__"})


def test_notebook_dataset_gets_fork_where_spawn_would_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    context, forked = worker_context({"num_workers": 2, "dataset": NotebookDataset(10)})
    assert context.get_start_method() == "fork"
    assert forked == NotebookClass("NotebookDataset", "spawn", forked=True)
    assert "NotebookDataset is defined in the notebook" in forked.note()
    # a dataset from a module is importable: nothing to change
    assert worker_context({"num_workers": 2, "dataset": KnownCostDataset(10)}) == (None, None)
    monkeypatch.setattr(sys, "platform", "darwin")
    with pytest.raises(
        WorkerSetupError,
        match=r"^--workers 2: NotebookDataset is defined in the notebook.*\.py file",
    ) as refused:
        worker_context({"num_workers": 2, "dataset": NotebookDataset(10)})
    assert isinstance(refused.value, NotebookClassError)
    assert refused.value.notebook_class == NotebookClass("NotebookDataset", "spawn", forked=False)


def test_a_rebuilt_loader_says_which_notebook_class_it_forked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")
    dataset = NotebookDataset(10)
    rebuilt = rebuild_loader(DataLoader(dataset), Knobs(workers=1), dataset=dataset, devices=1)
    assert rebuilt.notebook_class == NotebookClass("NotebookDataset", "spawn", forked=True)
    assert rebuilt.notes == (rebuilt.notebook_class.note(),)


def test_a_fit_records_the_notebook_class_it_forked_for_or_was_refused_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(multiprocessing, "get_start_method", lambda allow_none=False: "spawn")

    def fit_notebook_data() -> None:
        trainer = pl.Trainer(max_steps=3, accelerator="cpu", **QUIET_TRAINER)
        loader = DataLoader(NotebookDataset(40), batch_size=8, collate_fn=collate)
        trainer.fit(KnownCostModel(step_s=0.001), loader)

    with Intercept(Knobs(workers=1), RunControls(steps=3)) as run:
        fit_notebook_data()
    [fit] = run.fits
    forked = NotebookClass("NotebookDataset", "spawn", forked=True)
    assert fit.workload()["notebook_class"] == forked.fact()
    assert forked.note() in fit.notes

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    with (
        Intercept(Knobs(workers=1), RunControls(steps=3)) as run,
        pytest.raises(NotebookClassError),
    ):
        fit_notebook_data()
    [fit] = run.fits
    assert fit.workload()["notebook_class"] == {**forked.fact(), "forked": False}


def test_a_refused_notebook_class_error_survives_pickling() -> None:
    import pickle

    err = NotebookClassError(2, NotebookClass("NotebookDataset", "spawn", forked=False))
    again = pickle.loads(pickle.dumps(err))
    assert (str(again), again.notebook_class) == (str(err), err.notebook_class)


def test_trainer_and_fit_are_intercepted_and_restored() -> None:
    original_init, original_fit = pl.Trainer.__init__, pl.Trainer.fit
    with Intercept(Knobs(workers=2, batch_size=4), RunControls(steps=7, warmup=2)) as run:
        trainer = fit_known_cost(steps=50)
    assert (pl.Trainer.__init__, pl.Trainer.fit) == (original_init, original_fit)
    assert len(run.fits) == 1
    result = run.fits[0].probe.result()
    assert result.steps == 7
    assert set(result.records["samples"]) == {4}
    assert trainer.train_dataloader.num_workers == 2
    assert multiprocessing.active_children() == []


def test_datamodule_loader_is_rebuilt(lab_cache: Path) -> None:
    from speedlab.labs import image_lab

    model, data = image_lab(n=200, size=32)
    with Intercept(Knobs(batch_size=5), RunControls(steps=3)) as run:
        pl.Trainer(max_steps=10, accelerator="cpu", limit_val_batches=0, **QUIET_TRAINER).fit(
            model, data
        )
    assert set(run.fits[0].probe.result().records["samples"]) == {5}
    assert "train_dataloader" not in vars(data)


def test_global_state_restored_after_an_error_in_training() -> None:
    class Failing(KnownCostModel):
        def training_step(self, batch, batch_idx):
            os.environ["SPEEDLAB_TEST_VAR"] = "set by the cell"
            raise ValueError("bad step")

    sigint = signal.getsignal(signal.SIGINT)
    before = torch.get_float32_matmul_precision()
    with (
        pytest.raises(ValueError, match="bad step"),
        Intercept(Knobs(matmul="medium", workers=2)) as run,
    ):
        assert torch.get_float32_matmul_precision() == "medium"
        trainer = pl.Trainer(max_steps=5, accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(Failing(), DataLoader(KnownCostDataset(100), batch_size=4))
    assert torch.get_float32_matmul_precision() == before
    assert signal.getsignal(signal.SIGINT) == sigint
    assert "SPEEDLAB_TEST_VAR" not in os.environ
    assert isinstance(run.fits[0].exception, ValueError)
    assert multiprocessing.active_children() == []


def test_amp_and_16_mixed_on_a_cpu_are_explained() -> None:
    """On any machine: the cell trains with ``accelerator="cpu"``. No warm-up: no FLOPs counted,
    so no peak measured (a CPU's bf16 peak takes seconds)."""
    with Intercept(Knobs(precision="amp"), RunControls(steps=3, warmup=0)) as run:
        fit_known_cost()
    assert any("precision=amp ran as bf16-mixed" in n for n in run.notes + run.fits[0].notes)
    assert str(run.fits[0].trainer.precision) == "bf16-mixed"
    with Intercept(Knobs(precision="16-mixed"), RunControls(steps=3, warmup=0)) as run:
        fit_known_cost()
    assert any(
        "precision=16-mixed is not supported on this hardware" in n for n in run.fits[0].notes
    )


@pytest.mark.parametrize("precision", [32, "32", "bf16"])
def test_lightnings_older_precision_names_are_not_called_unsupported(precision) -> None:
    """``precision=32`` is Lightning's older name for 32-true: it ran what was asked."""
    with Intercept(Knobs(), RunControls(steps=2, warmup=0)) as run:
        trainer = pl.Trainer(max_steps=2, accelerator="cpu", precision=precision, **QUIET_TRAINER)
        trainer.fit(KnownCostModel(step_s=0.0), DataLoader(KnownCostDataset(40), batch_size=4))
    assert not [n for n in run.fits[0].notes if "not supported" in n]


def test_two_trainers_in_one_cell_are_each_measured() -> None:
    with Intercept(Knobs(), RunControls(steps=4)) as run:
        fit_known_cost()
        fit_known_cost()
    assert [f.probe.result().steps for f in run.fits] == [4, 4]


def test_trainer_built_before_the_run_is_measured_too() -> None:
    trainer = pl.Trainer(max_steps=4, accelerator="cpu", **QUIET_TRAINER)
    callbacks = list(trainer.callbacks)
    with Intercept(Knobs()) as run:
        trainer.fit(KnownCostModel(step_s=0.001), DataLoader(KnownCostDataset(100), batch_size=4))
    assert run.fits[0].probe.result().steps == 4
    assert trainer.callbacks == callbacks  # the probe and its stop leave with the fit


class _OwnLoader(KnownCostModel):
    """A model that makes its own training DataLoader, and fails where ``fail_in`` says."""

    def __init__(self, fail_in: str = "", **kwargs) -> None:
        super().__init__(step_s=0.0, **kwargs)
        self.fail_in = fail_in

    def train_dataloader(self) -> DataLoader:
        return DataLoader(KnownCostDataset(64), batch_size=4, collate_fn=collate)

    def configure_optimizers(self):
        if self.fail_in == "configure_optimizers":
            raise ValueError("no optimizer")
        return super().configure_optimizers()


def test_a_fit_that_fails_before_it_asks_for_data_leaves_the_models_loader_its_own() -> None:
    """Lightning asks for the training DataLoader after configure_optimizers: the knobs' stand-in
    for the model's ``train_dataloader`` must go with the fit, or a later fit outside speedlab
    trains with this run's knobs."""
    model = _OwnLoader(fail_in="configure_optimizers")
    with pytest.raises(ValueError, match="no optimizer"), Intercept(Knobs(workers=2)):
        pl.Trainer(max_steps=3, accelerator="cpu", **QUIET_TRAINER).fit(model)
    assert "train_dataloader" not in vars(model)
    model.fail_in = ""
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", **QUIET_TRAINER)
    trainer.fit(model)
    assert (
        type(trainer.train_dataloader) is DataLoader and trainer.train_dataloader.num_workers == 0
    )


def test_the_knobs_apply_to_every_loader_lightning_asks_for() -> None:
    """With ``reload_dataloaders_every_n_epochs`` Lightning asks the model for a new loader each
    epoch: each one gets the knobs, not only the first."""
    seen = []

    class Reloaded(_OwnLoader):
        def on_train_epoch_start(self) -> None:
            seen.append(self.trainer.train_dataloader.num_workers)

    with Intercept(Knobs(workers=1)):
        pl.Trainer(
            max_epochs=3, reload_dataloaders_every_n_epochs=1, accelerator="cpu", **QUIET_TRAINER
        ).fit(Reloaded())
    assert seen == [1, 1, 1]


def test_the_cells_own_sigint_handler_outlives_its_fit() -> None:
    """A handler the cell installs before ``fit`` is the one in place after it, as without
    speedlab; the run's own is put back when the run ends."""
    before = signal.getsignal(signal.SIGINT)

    def cells(signum, frame) -> None:
        pass

    with Intercept(Knobs(), RunControls(steps=2)):
        signal.signal(signal.SIGINT, cells)
        fit_known_cost(steps=2)
        assert signal.getsignal(signal.SIGINT) is cells
    assert signal.getsignal(signal.SIGINT) is before


def test_the_trainers_deterministic_and_benchmark_are_put_back() -> None:
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark)
    with Intercept(Knobs(trainer={"deterministic": True, "benchmark": True})):
        trainer = pl.Trainer(max_steps=2, accelerator="cpu", **QUIET_TRAINER)
        assert torch.are_deterministic_algorithms_enabled()
        trainer.fit(KnownCostModel(step_s=0.0), DataLoader(KnownCostDataset(40), batch_size=4))
    assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark) == before


def test_precision_set_by_torchs_newer_api_is_measured_and_kept() -> None:
    """A process that set a backend's ``fp32_precision`` itself has no level to read back
    (torch refuses to say): the run trains, and every setting comes back as it was."""
    backends = torch.backends
    if not hasattr(backends.cuda.matmul, "fp32_precision"):
        pytest.skip("torch before 2.9 has no fp32_precision settings")
    before = (backends.cuda.matmul.fp32_precision, backends.mkldnn.matmul.fp32_precision)
    levels = {name: logging.getLogger(name).level for name in ("lightning.pytorch",)}
    try:
        backends.cuda.matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            torch.get_float32_matmul_precision()
        with Intercept(Knobs(matmul="medium"), RunControls(steps=3, warmup=1)) as run:
            assert backends.mkldnn.matmul.fp32_precision == "bf16"
            fit_known_cost(steps=3)
        assert run.fits[0].probe.result().steps == 3
        assert backends.cuda.matmul.fp32_precision == "tf32"
        assert backends.mkldnn.matmul.fp32_precision == before[1]
        assert {name: logging.getLogger(name).level for name in levels} == levels
    finally:
        torch.set_float32_matmul_precision("highest")
        backends.cuda.matmul.fp32_precision, backends.mkldnn.matmul.fp32_precision = before


def test_an_interrupt_while_the_run_ends_still_puts_everything_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ending a run has several steps (unpatching, ending workers, clearing compiled code,
    the global state): one that raises does not skip the others."""
    original_init = pl.Trainer.__init__
    before = (torch.get_float32_matmul_precision(), dict(os.environ))

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(intercept, "forget_compiled", interrupted)
    with pytest.raises(KeyboardInterrupt), Intercept(Knobs(matmul="medium", compile="on")):
        os.environ["SPEEDLAB_TEST_VAR"] = "set by the cell"
    assert pl.Trainer.__init__ is original_init
    assert (torch.get_float32_matmul_precision(), dict(os.environ)) == before


def test_preload_ram_keeps_augmentation_random(lab_cache: Path) -> None:
    dataset = ShapesDataset(make_shapes(n=64, size=32), train=True, augment=True)
    loaded = preload_ram(dataset)
    cached = loaded.dataset
    assert (
        cached is not dataset and dataset.load.__self__ is dataset
    )  # the user's dataset is untouched
    assert "augmentation still runs" in loaded.notes[0]
    assert ram_cache(torch.utils.data.Subset(dataset, [1, 2])) == "loads"
    torch.manual_seed(0)
    first = [cached[0][0] for _ in range(6)]
    assert any(not torch.equal(first[0], x) for x in first[1:])


def test_preload_ram_of_a_plain_dataset_freezes_items_and_says_so() -> None:
    loaded = preload_ram(KnownCostDataset(20))
    assert len(loaded.dataset) == 20
    assert "frozen" in loaded.notes[0]
    assert ram_cache(KnownCostDataset(20)) == "items"


class HugeItems(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.zeros(16_384)


def test_preload_ram_refuses_with_sizes_when_it_would_not_fit() -> None:
    with pytest.raises(
        PreloadError,
        match=r"--preload ram: 10000000 samples need about 655\.36 GB, more than the .* GB "
        r"speedlab allows \(80% of the .* GB of RAM available\)",
    ):
        preload_ram(HugeItems())


def test_preload_shm_copies_and_removes(lab_cache: Path) -> None:
    dataset = ShapesDataset(make_shapes(n=40, size=32), train=True)
    loaded = preload_shm(dataset)
    try:
        moved = loaded.dataset
        assert str(moved.files[0]).startswith("/dev/shm/speedlab-")
        assert moved.files[0].read_bytes() == dataset.files[0].read_bytes()
        assert dataset.files[0].parent.parent == dataset.root  # the original still points at disk
        assert moved.load(0).shape == (32, 32, 3)
    finally:
        loaded.cleanup()
    assert not Path(moved.root).exists()


def test_preload_shm_reads_every_file_through_the_datasets_slow_storage(lab_cache: Path) -> None:
    dataset = ShapesDataset(make_shapes(n=40, size=32), train=True)
    dataset.opener = ThrottledOpener(bytes_per_s=math.inf, latency_s=0.01)
    start = time.perf_counter()
    loaded = preload_shm(dataset)
    took = time.perf_counter() - start
    try:
        assert took >= 0.01 * len(dataset.files)  # each file waited its latency once
        assert "reading each from the dataset's storage" in loaded.notes[0]
    finally:
        loaded.cleanup()


def test_preload_shm_refuses_when_dev_shm_is_too_small(tmp_path: Path) -> None:
    dataset = ShapesDataset(make_shapes(n=40, size=32), train=True)
    huge = tmp_path / "huge.jpg"
    with huge.open("wb") as f:
        f.truncate(10**12)  # sparse: a terabyte on paper
    dataset.files = [huge]
    dataset.root = tmp_path
    with pytest.raises(
        PreloadError, match=r"--preload shm: the 1 files need 1000\.00 GB, but /dev/shm has only"
    ):
        preload_shm(dataset)


def test_twenty_runs_with_workers_leak_nothing() -> None:
    process = psutil.Process()
    knobs = Knobs(workers=2, persistent_workers=True, pin_memory=True)
    with Intercept(knobs, RunControls(steps=3)):
        fit_known_cost(steps=3)  # warm imports and caches before counting
    fds, threads = process.num_fds(), set(threading.enumerate())
    children = {p.pid for p in process.children(recursive=True)}  # e.g. a resource tracker
    for _ in range(20):
        with Intercept(knobs, RunControls(steps=3)):
            fit_known_cost(steps=3)
    # PyTorch closes a loader's index queues without joining their feeder threads, which end
    # (closing their pipes) a moment later; on a busy machine, after the run. One that does
    # not end within the wait is a leak, and the counts below catch it.
    for thread in set(threading.enumerate()) - threads:
        thread.join(timeout=5)
    assert multiprocessing.active_children() == []
    assert {p.pid for p in process.children(recursive=True)} <= children
    assert process.num_fds() <= fds
    assert set(threading.enumerate()) <= threads


class FakeGpu(CpuDevice):
    """A device whose answers the test sets: no GPU needed to check what the run asks of it."""

    type, name = "cuda", "GPU"

    def amp(self) -> tuple[str, str]:
        return "16-mixed", "precision=amp ran as 16-mixed on a fake GPU."

    def matmul(self, level: str) -> tuple[str, bool]:
        return f"matmul={level} on a fake GPU.", False


@pytest.fixture
def gpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose default device is a (fake) GPU, as a CUDA machine's is."""
    monkeypatch.setattr(devices, "DEVICES", {"cuda": FakeGpu, "cpu": CpuDevice})
    assert type(default_device()) is FakeGpu


def test_precision_asks_the_device_only_what_amp_means_there(gpu_machine: None) -> None:
    assert resolve_precision("bf16-mixed", "gpu") == ("bf16-mixed", None)
    assert resolve_precision("amp", "gpu") == (
        "16-mixed",
        "precision=amp ran as 16-mixed on a fake GPU.",
    )
    assert resolve_precision("amp", "cpu") == CpuDevice().amp()


@pytest.mark.parametrize(
    ("accelerator", "chosen"),
    [
        ("cpu", "bf16-mixed"),
        pytest.param(CPUAccelerator(), "bf16-mixed", id="CPUAccelerator()"),
        pytest.param(
            pytorch_lightning.accelerators.CPUAccelerator(),
            "bf16-mixed",
            id="pytorch_lightning.CPUAccelerator()",
        ),
        ("gpu", "16-mixed"),  # CUDA or MPS, whichever is available
        ("cuda", "16-mixed"),
        pytest.param(CUDAAccelerator(), "16-mixed", id="CUDAAccelerator()"),
        ("auto", "16-mixed"),
        (None, "16-mixed"),
        ("tpu", "16-mixed"),  # not available here: Lightning refuses it, in its own words
        ("hpu", "bf16-mixed"),  # a device speedlab does not know
    ],
)
def test_amp_resolves_for_the_device_the_cells_trainer_trains_on(
    gpu_machine: None, accelerator: object, chosen: str
) -> None:
    kwargs = {} if accelerator is None else {"accelerator": accelerator}
    resolved, _, notes = Intercept(Knobs(precision="amp")).trainer_kwargs(kwargs)
    assert resolved["precision"] == chosen and len(notes) == 1
    assert ("fake GPU" in notes[0]) == (chosen == "16-mixed")


def test_a_cpu_cell_on_a_gpu_machine_trains_with_the_cpus_amp(gpu_machine: None) -> None:
    """A real Trainer on the CPU, on a machine whose default device is a GPU: the cell's
    ``accelerator`` decides, and ``--trainer accelerator=cpu`` overrides the cell's. No
    warm-up: no FLOPs counted, so no peak measured (a CPU's bf16 peak takes seconds)."""
    with Intercept(Knobs(precision="amp"), RunControls(steps=3, warmup=0)) as run:
        trainer = pl.Trainer(max_steps=3, accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(KnownCostModel(step_s=0.001), DataLoader(KnownCostDataset(64), batch_size=4))
    assert str(trainer.precision) == "bf16-mixed" and trainer.global_step == 3
    amp_notes = [n for n in run.notes + run.fits[0].notes if "precision=amp" in n]
    assert amp_notes == [CpuDevice().amp()[1]]
    overridden = Intercept(Knobs(precision="amp", trainer={"accelerator": "cpu"}))
    assert overridden.trainer_kwargs({"accelerator": "gpu"})[0]["precision"] == "bf16-mixed"


@pytest.mark.parametrize("cpu_changes", [True, False])
def test_a_matmul_level_is_inert_only_where_no_device_here_changes(
    monkeypatch: pytest.MonkeyPatch, cpu_changes: bool
) -> None:
    """The note is the default device's; a Trainer may pick another, so a level counts as acting
    where it changes float32 matmuls on any device a run here may train on."""
    monkeypatch.setattr(CpuDevice, "matmul", lambda self, level: ("on the CPU", cpu_changes))
    assert _matmul("medium", [FakeGpu(), CpuDevice()]) == (
        "matmul=medium on a fake GPU.",
        cpu_changes,
    )


class ReadsCounted(KnownCostDataset):
    """Counts the items read once training has ended (``trained``, set by ``EndOfTraining``)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.trained = False
        self.read_after: list[int] = []

    def __getitem__(self, index: int):
        if self.trained:
            self.read_after.append(index)
        return super().__getitem__(index)


class EndOfTraining(pl.Callback):
    def __init__(self, dataset: ReadsCounted) -> None:
        self.dataset = dataset

    def on_train_end(self, trainer: pl.Trainer, module: pl.LightningModule) -> None:
        self.dataset.trained = True


@pytest.mark.parametrize("grading", [False, True], ids=["profiled", "graded"])
def test_the_datas_fingerprint_is_read_after_a_fit_only_where_an_assignment_grades(
    grading: bool,
) -> None:
    """A slow or side-effecting dataset pays nothing after a profiled fit; grading reads the
    fingerprint's few items (``speedlab.measure.dataset``) to compare the data."""
    dataset = ReadsCounted(64)

    def train() -> None:
        trainer = pl.Trainer(
            max_steps=4, accelerator="cpu", callbacks=[EndOfTraining(dataset)], **QUIET_TRAINER
        )
        trainer.fit(KnownCostModel(step_s=0.001), DataLoader(dataset, batch_size=8))

    with Intercept(Knobs(), RunControls(steps=4), fingerprint_data=grading) as run:
        train()
    workload = run.fits[0].workload()
    if grading:
        assert len(dataset.read_after) == SAMPLES and "data" in workload
    else:
        assert dataset.read_after == [] and "data" not in workload


def test_runs_cannot_overlap_and_the_patches_come_off_whatever_the_order() -> None:
    """A panel's run in its thread and another cell's (or panel's): the second is refused in
    one line, and the first's patches come off as it ends."""
    original = pl.Trainer.__dict__["__init__"]
    entered, release, refused = threading.Event(), threading.Event(), []

    def panel_run() -> None:
        with Intercept(Knobs(batch_size=4)):
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=panel_run)
    thread.start()
    entered.wait(10)
    try:
        with Intercept(Knobs()):
            pass
    except intercept.RunInProgress as err:
        refused.append(str(err))
    release.set()
    thread.join()
    assert refused == [
        "Another speedlab run is training in this kernel (a panel's or another cell's): wait "
        "for it to end, or press its Stop, then run this again."
    ]
    assert pl.Trainer.__dict__["__init__"] is original
    with Intercept(Knobs()):  # the next run may start
        assert pl.Trainer.__dict__["__init__"] is not original


def test_a_fit_called_with_a_wrong_argument_leaves_a_prebuilt_trainer_as_it_was() -> None:
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
    before = list(trainer.callbacks)
    loader = DataLoader(KnownCostDataset(40), batch_size=8)
    with Intercept(Knobs()), pytest.raises(TypeError, match="train_dataloader"):
        trainer.fit(KnownCostModel(step_s=0.0), train_dataloader=loader)  # Lightning 1.x's name
    assert trainer.callbacks == before


def test_a_fit_in_another_thread_during_a_run_trains_as_it_would_alone() -> None:
    """A panel trains in a background thread while the kernel runs other cells: a Trainer built
    and fitted by one of those is not the run's, and gets neither its knobs nor its probe."""
    started, finish, fits = threading.Event(), threading.Event(), []

    def panel_run() -> None:
        with Intercept(Knobs(workers=2, batch_size=16)) as session:
            started.set()
            finish.wait(60)
            fits.extend(session.fits)

    panel = threading.Thread(target=panel_run)
    panel.start()
    try:
        assert started.wait(10)
        trainer = pl.Trainer(max_steps=3, accelerator="cpu", **QUIET_TRAINER)
        loader = DataLoader(KnownCostDataset(64), batch_size=8)
        trainer.fit(KnownCostModel(step_s=0.0), loader)
    finally:
        finish.set()
        panel.join()
    assert fits == []
    assert not any(type(c).__name__ in ("SpeedProbe", "PlannedStop") for c in trainer.callbacks)
    assert trainer.global_step == 3 and len(loader.dataset.batch_seconds(8)) == 3  # 8 a batch
