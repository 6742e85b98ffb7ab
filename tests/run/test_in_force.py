"""What ran: a knob that could not act is labelled, compared and diagnosed by the value in force."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER, KnownCostDataset, KnownCostModel
from speedlab.results.comparison import Verdict


class OwnLoader(DataLoader):
    """A DataLoader subclass, as LitData's StreamingDataLoader is: speedlab does not rebuild it."""


def train_with(loader_class: type[DataLoader]) -> None:
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
    loader = loader_class(KnownCostDataset(400, sleep_s=0.001), batch_size=8)
    trainer.fit(KnownCostModel(step_s=0.002), loader)


def test_workers_on_a_loader_that_is_not_rebuilt_ran_as_the_cell_made_them() -> None:
    sweep = profile_train(
        lambda: train_with(OwnLoader), workers=[0, 2], steps=20, live=False, store=False
    )
    base, two = sweep.runs
    assert two.knobs["workers"] == 2 and two.ran["workers"] == 0
    assert two.loader_workers() == 0  # the doctor reads what ran
    assert two.label(base) == "workers=2 (ran 0)"
    assert two.ran_otherwise == {"workers": 0}
    assert two.comparison.inert == ("workers=0/2",)
    assert two.comparison.verdict is Verdict.within_noise
    assert "workers=2 (ran 0)" in str(sweep)
    assert any("not applied" in note for note in two.notes)


def test_a_rebuilt_loader_runs_the_workers_asked_for() -> None:
    sweep = profile_train(
        lambda: train_with(DataLoader), workers=[0, 2], steps=20, live=False, store=False
    )
    base, two = sweep.runs
    assert two.ran["workers"] == 2 and two.loader_workers() == 2
    assert two.label(base) == "workers=2" and two.ran_otherwise == {}
    assert two.comparison.inert == ()


def test_pinned_memory_without_a_gpu_ran_unpinned_and_is_within_noise() -> None:
    # The cell trains on the CPU (accelerator="cpu") on any machine: nothing to copy to.
    sweep = profile_train(
        lambda: train_with(DataLoader), pin_memory=[False, True], steps=20, live=False, store=False
    )
    base, pinned = sweep.runs
    assert pinned.knobs["pin_memory"] is True and pinned.ran["pin_memory"] is False
    assert pinned.label(base) == "pin_memory=on (ran off)"
    assert pinned.comparison.verdict is Verdict.within_noise


def test_a_compile_that_compiled_nothing_the_step_ran_is_shown_as_off() -> None:
    from tests.run.test_compiling import OwnWeightStep

    def train() -> None:
        trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(OwnWeightStep(), DataLoader(KnownCostDataset(200, sleep_s=0.0), batch_size=8))

    sweep = profile_train(train, compile=["off", "on"], steps=12, live=False, store=False)
    plain, compiled = sweep.runs
    assert compiled.ran["compile"] == "off"
    assert compiled.label(plain) == "compile=on (ran off)"
    assert compiled.comparison.verdict is Verdict.within_noise
    assert any("ran nothing compiled" in note for note in compiled.notes)


def test_a_matmul_level_the_cell_sets_itself_is_the_one_in_force() -> None:
    """The cell's own torch.set_float32_matmul_precision comes after the knob's: the level in
    force labels the run, and two runs that ran at it are within noise whatever their speeds."""

    def train() -> None:
        torch.set_float32_matmul_precision("high")
        train_with(DataLoader)

    sweep = profile_train(train, matmul=["highest", "medium"], steps=20, live=False, store=False)
    base, medium = sweep.runs
    assert (
        medium.ran_otherwise == {"matmul": "high"}
        and medium.label(base) == "matmul=medium (ran high)"
    )
    assert medium.comparison.inert == ("matmul=highest/medium",)
    assert medium.workload["matmul_changes"] is False
    [note] = [n for n in medium.notes if n.startswith("matmul=")]
    assert note.startswith("matmul=medium did not act: float32 matmuls ran at 'high'")
    assert torch.get_float32_matmul_precision() == "highest"  # as before the run


def test_a_batch_size_a_batch_sampler_overrides_runs_as_the_sampler_batches() -> None:
    def train() -> None:
        data = KnownCostDataset(400)
        batches = BatchSampler(SequentialSampler(data), batch_size=16, drop_last=False)
        trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(KnownCostModel(step_s=0.002), DataLoader(data, batch_sampler=batches))

    sweep = profile_train(train, batch_size=[16, 64], steps=20, live=False, store=False)
    base, large = sweep.runs
    assert (
        large.ran_otherwise == {"batch_size": 16} and large.label(base) == "batch_size=64 (ran 16)"
    )
    assert large.comparison.verdict is Verdict.within_noise
    assert large.comparison.inert == ("batch_size=16/64",)


class TwoLoaders(KnownCostModel):
    """Trains on a batch of each of two loaders at once."""

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        (xa, ya), (xb, yb) = batch["a"], batch["b"]
        return super().training_step((torch.cat([xa, xb]), torch.cat([ya, yb])), batch_idx)


def test_workers_are_counted_per_loader_as_the_knob_sets_them() -> None:
    """Two training loaders with 2 workers each: the knob asked 2 a loader and ran it."""

    def train() -> None:
        loaders = [DataLoader(KnownCostDataset(400), batch_size=8) for _ in range(2)]
        trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(TwoLoaders(step_s=0.002), {"a": loaders[0], "b": loaders[1]})

    sweep = profile_train(train, workers=[0, 2], steps=20, live=False, store=False)
    base, two = sweep.runs
    assert two.error is None and two.ran_otherwise == {} and two.label(base) == "workers=2"
    assert two.workload["loader_workers"] == 4  # worker processes in all


def test_knobs_set_as_a_trainer_is_built_say_they_did_not_act_on_one_built_before_the_run() -> None:
    """A Trainer built in an earlier cell: its own arguments stand, the runs are labelled by
    them, and a note says why and what to do."""
    trainer = pl.Trainer(max_steps=12, accelerator="cpu", **QUIET_TRAINER)

    def train() -> None:
        trainer.fit(KnownCostModel(step_s=0.002), DataLoader(KnownCostDataset(400), batch_size=8))

    sweep = profile_train(
        train, trainer={"accumulate_grad_batches": [1, 4]}, steps=20, live=False, store=False
    )
    base, four = sweep.runs
    assert base.steps == 12  # the Trainer's own max_steps, not the run's 20
    assert any(
        n.startswith(
            "trainer.accumulate_grad_batches=1, steps=20 did not act: the Trainer was built"
        )
        for n in base.notes
    )
    assert four.ran_otherwise == {"trainer.accumulate_grad_batches": 1}
    assert four.label(base) == "trainer.accumulate_grad_batches=4 (ran 1)"
    assert four.ran.trainer == {"accumulate_grad_batches": 1}
    # A Trainer trains to its max_steps once: the second run's fit trained nothing.
    assert four.steps == 0 and four.error.startswith(
        "The fit trained no steps: its Trainer, built before the run, had already trained"
    )
    assert "within noise" not in str(sweep.table())


def test_a_matmul_level_on_a_model_without_float32_matmuls_changed_nothing() -> None:
    def train() -> None:
        trainer = pl.Trainer(max_epochs=1, accelerator="cpu", precision="64-true", **QUIET_TRAINER)
        loader = DataLoader(KnownCostDataset(400, sleep_s=0.001), batch_size=8)
        trainer.fit(KnownCostModel(step_s=0.002), loader)

    sweep = profile_train(train, matmul=["highest", "medium"], steps=20, live=False, store=False)
    _, medium = sweep.runs
    assert medium.error is None and medium.workload["precision"] == "64-true"
    assert medium.workload["matmul_changes"] is False
    assert medium.comparison.inert == ("matmul=highest/medium",)
    assert "matmul=medium changed nothing: the model trains in 64-true" in " ".join(medium.notes)
