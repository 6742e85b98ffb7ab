"""speedlab.measure.unlisted: speedlab's callbacks out of the trainer's list in training steps
alone, on real Lightning fits."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.probe import SpeedProbe
from speedlab.run.stopping import PlannedStop

OURS = ("SpeedProbe", "PlannedStop")


class Seen(pl.Callback):
    """The names of the trainer's callbacks where each hook it listens to runs."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[str, ...]]] = {}

    def _see(self, hook: str, trainer: Any) -> None:
        names = tuple(type(c).__name__ for c in trainer.callbacks)
        self.seen.setdefault(hook, []).append(names)

    def on_train_epoch_start(self, trainer: Any, *_: Any) -> None:
        self._see("epoch_start", trainer)

    def on_train_batch_start(self, trainer: Any, *_: Any) -> None:
        self._see("step", trainer)

    def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
        self._see("step", trainer)

    def on_validation_batch_start(self, trainer: Any, *_: Any) -> None:
        self._see("validation", trainer)

    def on_train_epoch_end(self, trainer: Any, *_: Any) -> None:
        self._see("epoch_end", trainer)

    def on_exception(self, trainer: Any, *_: Any) -> None:
        self._see("exception", trainer)


class Validated(KnownCostModel):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.training_step(batch, batch_idx)


def fit(model: pl.LightningModule, *callbacks: pl.Callback, **trainer: Any) -> pl.Trainer:
    """A fit of 10 steps an epoch (two, unless ``trainer`` says), validated after each
    where the model validates, with ``callbacks``."""
    settings = {"max_epochs": 2, "accelerator": "cpu", "num_sanity_val_steps": 0}
    t = pl.Trainer(callbacks=list(callbacks), **{**settings, **QUIET_TRAINER, **trainer})
    validated = known_cost_loader(n=16) if isinstance(model, Validated) else None
    t.fit(model, known_cost_loader(n=80), validated)
    return t


def test_the_steps_list_the_users_callbacks_alone_and_every_other_hook_all_of_them() -> None:
    probe, seen = SpeedProbe(warmup=2, sample_system=False), Seen()
    stop = PlannedStop(lambda: False)
    t = fit(Validated(step_s=0.001), stop, probe, seen)
    listed = t.callbacks
    whole = tuple(type(c).__name__ for c in listed)
    assert {"SpeedProbe", "PlannedStop", "Seen"} <= set(whole)
    assert len(seen.seen["step"]) == 2 * 2 * 10
    for names in seen.seen["step"]:
        assert names == tuple(n for n in whole if n not in OURS)
    for hook in ("epoch_start", "validation", "epoch_end"):
        assert seen.seen[hook] and all(names == whole for names in seen.seen[hook]), hook
    assert t.callbacks is listed  # the trainer's own list, changed in place
    result = probe.result()
    assert result.steps == 20 and result.phases["validation"] > 0  # its validation hooks ran
    assert result.records["epoch"][9:11] == [0, 1]  # and its epoch's start


def test_a_stop_asked_for_still_ends_a_validation_pass_at_its_next_batch() -> None:
    """PlannedStop's validation hook finds it listed in a probe's fit, out of the steps' list
    alone: the pass ends at its first batch."""
    asked = [False]

    class AskedInStep(Validated):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            asked[0] = batch_idx == 9
            return super().training_step(batch, batch_idx)

    seen = Seen()  # before the stop: it sees a batch start before the stop ends the pass
    stop, probe = PlannedStop(lambda: asked[0]), SpeedProbe(sample_system=False)
    fit(AskedInStep(step_s=0.0), seen, stop, probe, max_epochs=1)  # the probe unlists the stop
    assert seen.seen["validation"] == [("Seen", "PlannedStop", "SpeedProbe")]  # of two batches


def test_an_error_in_a_step_reaches_the_callbacks_with_the_whole_list() -> None:
    class Failing(KnownCostModel):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if batch_idx == 6:
                raise RuntimeError("step 6 fails")
            return super().training_step(batch, batch_idx)

    probe, seen = SpeedProbe(warmup=2, sample_system=False), Seen()
    with pytest.raises(RuntimeError, match="step 6 fails"):
        fit(Failing(step_s=0.0), probe, seen)
    assert seen.seen["exception"] == [("SpeedProbe", "Seen")]
    assert isinstance(probe.exception, RuntimeError)  # its on_exception ran
    assert probe.result().steps == 6


def test_a_callback_added_in_a_step_stays_and_two_probes_come_back_in_their_places() -> None:
    """The second probe's wrappers sit over the first's: the one on top takes both out, the
    one under finds none to take. A callback the user adds in a step stays after them."""
    first, second = SpeedProbe(sample_system=False), SpeedProbe(sample_system=False)
    added = Seen()

    class Adds(pl.Callback):
        def on_train_batch_end(self, trainer: Any, *_: Any) -> None:
            if added not in trainer.callbacks:
                trainer.callbacks.append(added)

    t = fit(KnownCostModel(step_s=0.0), first, Adds(), second)
    assert [type(c).__name__ for c in t.callbacks] == ["SpeedProbe", "Adds", "SpeedProbe", "Seen"]
    assert t.callbacks[0] is first and t.callbacks[2] is second
    assert first.result().steps == second.result().steps == 20
    assert all(names == ("Adds", "Seen") for names in added.seen["step"])
