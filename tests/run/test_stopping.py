"""Runs speedlab ends on purpose close Lightning's progress bar as complete; others as they were."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import nbformat
import pytest
from lightning.pytorch.callbacks import TQDMProgressBar

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.results.knobs import Knobs
from speedlab.run.intercept import Intercept, RunControls
from tests.nbexec import execute

BATCHES = 40  # per epoch: every stop below comes well before the epoch's end
WITH_BAR = {**QUIET_TRAINER, "enable_progress_bar": True}


class StopAt(pl.Callback):
    """Calls ``stop(trainer)`` after the given step: the panel's Stop, a bug, an early stop."""

    def __init__(self, step: int, stop) -> None:
        self.step, self.stop = step, stop

    def on_train_batch_end(self, trainer, *_) -> None:
        if trainer.global_step == self.step:
            self.stop(trainer)


def fit(callbacks=(), **trainer_kw) -> TQDMProgressBar:
    """One epoch of known-cost training with a TQDM bar; the bar's callback after the fit."""
    bar = TQDMProgressBar(refresh_rate=3)  # its count lags behind the last steps
    trainer = pl.Trainer(
        accelerator="cpu",
        callbacks=[bar, *callbacks],
        **{"max_epochs": 1, **trainer_kw},
        **WITH_BAR,
    )
    trainer.fit(KnownCostModel(step_s=0.01), known_cost_loader(n=8 * BATCHES, batch_size=8))
    return bar


@pytest.mark.parametrize("controls", [RunControls(steps=10), RunControls(time=0.25)])
def test_a_run_cut_short_by_steps_or_time_closes_its_bar_complete(controls) -> None:
    with Intercept(Knobs(), controls) as session:
        bar = fit().train_progress_bar
    assert 0 < session.fits[0].trainer.global_step < BATCHES
    # tqdm.notebook paints a bar closed with n < total red
    assert bar.n == bar.total == session.fits[0].trainer.global_step


def test_stop_closes_the_bar_complete() -> None:
    with Intercept(Knobs()) as session:
        bar = fit([StopAt(5, lambda _: session.stop())])
    assert bar.train_progress_bar.n == bar.train_progress_bar.total == 5


class Validated(KnownCostModel):
    """Counts its validation steps."""

    validated = 0

    def validation_step(self, batch, batch_idx) -> None:
        self.validated += 1


def test_stop_skips_the_fits_validation_and_leaves_the_trainer_as_it_was_built() -> None:
    model, val = Validated(step_s=0.0), known_cost_loader(n=24, batch_size=8)
    trainer = pl.Trainer(  # built before the run, as a cell run earlier would have
        max_epochs=1,
        num_sanity_val_steps=0,
        accelerator="cpu",
        callbacks=[StopAt(5, lambda _: session.stop())],
        **WITH_BAR,
    )
    with Intercept(Knobs()) as session:
        trainer.fit(model, known_cost_loader(n=8 * BATCHES, batch_size=8), val)
        session.stop()  # as the panel's ticker repeats it, once the fit has ended
    assert trainer.global_step == 5 and model.validated == 0
    assert trainer.limit_val_batches == 1.0  # the Trainer's own again: it validates
    trainer.validate(model, val, verbose=False)
    assert model.validated == 3


def test_a_trainer_built_before_the_run_is_completed_only_by_stop() -> None:
    trainer = pl.Trainer(
        max_epochs=1, max_steps=7, accelerator="cpu", callbacks=[TQDMProgressBar()], **WITH_BAR
    )
    loader = known_cost_loader(n=8 * BATCHES, batch_size=8)
    with Intercept(Knobs(), RunControls(steps=3)):  # its own max_steps stays
        trainer.fit(KnownCostModel(step_s=0.0), loader)
    assert trainer.global_step == 7
    bar = trainer.progress_bar_callback.train_progress_bar
    assert bar.n == 7 and bar.total == BATCHES


class CellBug(Exception):
    pass


def test_a_users_error_or_own_early_stop_leaves_the_bar_as_lightning_draws_it() -> None:
    def boom(_) -> None:
        raise CellBug("cell bug")

    bar = TQDMProgressBar()
    with Intercept(Knobs(), RunControls(steps=30)), pytest.raises(CellBug):
        trainer = pl.Trainer(
            max_epochs=1, accelerator="cpu", callbacks=[bar, StopAt(5, boom)], **WITH_BAR
        )
        trainer.fit(KnownCostModel(step_s=0.0), known_cost_loader(n=8 * BATCHES, batch_size=8))
    assert bar.train_progress_bar.n == 5 and bar.train_progress_bar.total == BATCHES
    bar.train_progress_bar.close()  # Lightning leaves it open after an error

    with Intercept(Knobs()):  # the cell's own stop: not speedlab's to redraw
        own = fit([StopAt(5, lambda trainer: setattr(trainer, "should_stop", True))])
    assert own.train_progress_bar.n < own.train_progress_bar.total == BATCHES


NOTEBOOK_BAR_CELL = """\
import lightning.pytorch as pl
from lightning.pytorch.callbacks import TQDMProgressBar
from speedlab.labs import KnownCostModel, known_cost_loader

def fit(**steps):
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_model_summary=False, callbacks=[TQDMProgressBar()], **steps)
    trainer.fit(KnownCostModel(step_s=0.0), known_cost_loader(n=8 * 40, batch_size=8))
"""


def _bar_styles(notebook: nbformat.NotebookNode) -> list[list[str]]:
    """Per cell, the style of every progress bar it shows (from the saved widget state)."""
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    styles = []
    for cell in notebook.cells:
        found = []
        for output in cell.get("outputs", []):
            view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            children = state.get(view["model_id"], {}).get("state", {}) if view else {}
            for child in children.get("children", []):
                model = state[child.removeprefix("IPY_MODEL_")]["state"]
                if model["_model_name"] == "FloatProgressModel":
                    found.append(model["bar_style"])
        styles.append(found)
    return styles


@pytest.mark.slow
def test_in_a_notebook_a_run_cut_short_by_steps_leaves_no_red_bar(tmp_path: Path) -> None:
    cells = [
        "%load_ext speedlab",
        NOTEBOOK_BAR_CELL,
        "%%profile_train --steps 10\nfit()",
        "fit(max_steps=10)",  # Lightning alone, cut short the same way: tqdm paints it red
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    path = tmp_path / "bar.ipynb"
    nbformat.write(notebook, path)
    styles = _bar_styles(execute(path, tmp_path, timeout=120).notebook)
    assert styles[2] == ["success"]
    assert styles[3] == ["danger"]


def test_a_stop_asked_for_after_the_fit_ended_does_not_make_it_stopped() -> None:
    with Intercept(Knobs()) as session:
        fit([StopAt(5, lambda _: session.stop())])
    with Intercept(Knobs()) as late:
        fit()
        late.stop()  # a Stop clicked as the run ends by itself
    assert session.fits[0].stopped and not late.fits[0].stopped


class StopInValidation(pl.Callback):
    """Asks for a stop at the second batch of the first validation pass."""

    def __init__(self, stop) -> None:
        self.stop = stop

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *_) -> None:
        if batch_idx == 1 and not trainer.sanity_checking:
            self.stop()


def test_a_stop_during_validation_ends_the_pass_at_its_next_batch() -> None:
    model = Validated(step_s=0.0)
    with Intercept(Knobs()) as session:
        trainer = pl.Trainer(
            max_epochs=3,
            num_sanity_val_steps=0,
            accelerator="cpu",
            callbacks=[StopInValidation(session.stop)],
            **QUIET_TRAINER,
        )
        trainer.fit(
            model,
            known_cost_loader(n=8 * 10, batch_size=8),
            known_cost_loader(n=8 * 20, batch_size=8),
        )
    assert model.validated == 2 and trainer.current_epoch == 1  # of 20 batches, 3 epochs
    assert session.fits[0].stopped
