"""speedlab.measure.syncs: host syncs counted per source line on a GPU, and what counts as a library.

The counting needs CUDA's sync debug mode, so those tests run only on a GPU machine.
"""

from __future__ import annotations

import inspect
import warnings

import lightning.pytorch as pl
import pytest
import torch

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.probe import SpeedProbe
from speedlab.measure.syncs import WATCH_STEPS, in_library

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize(
    ("path", "library"),
    [
        ("/usr/lib/python3/dist-packages/torch/_tensor.py", True),
        ("/home/me/.venv/lib/python3.11/site-packages/lightning/pytorch/loops/loop.py", True),
        ("/home/me/project/train.py", False),
        ("/tmp/ipykernel_812/3920.py", False),  # a notebook cell
    ],
)
def test_installed_packages_are_libraries_and_the_rest_is_the_users(
    path: str, library: bool
) -> None:
    assert in_library(path) is library


class ItemEveryStep(KnownCostModel):
    """Copies its loss to the host on one known line every step, and warns once a step."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.seen = loss.item()
        warnings.warn("the user's own warning", UserWarning, stacklevel=1)
        return loss


_source, _first = inspect.getsourcelines(ItemEveryStep)
ITEM_LINE = _first + next(i for i, text in enumerate(_source) if "loss.item()" in text)


@needs_gpu
@pytest.mark.gpu
def test_a_loss_item_is_counted_once_a_step_on_its_line() -> None:
    probe = SpeedProbe(warmup=5, sample_system=False)
    trainer = pl.Trainer(
        accelerator="gpu", devices=1, max_steps=12, callbacks=[probe], **QUIET_TRAINER
    )
    with pytest.warns(UserWarning, match="the user's own warning"):  # passed on, not swallowed
        trainer.fit(ItemEveryStep(step_s=0.0), known_cost_loader(n=400, batch_size=8))
    syncs = probe.result().host_syncs
    assert syncs["steps"] == WATCH_STEPS
    [mine] = [e for e in syncs["lines"] if e["file"] == __file__]
    assert (mine["line"], mine["count"]) == (ITEM_LINE, WATCH_STEPS)
    assert torch.cuda.get_sync_debug_mode() == 0  # restored


@needs_gpu
@pytest.mark.gpu
def test_the_debug_mode_is_restored_when_a_watched_step_fails() -> None:
    class Fails(ItemEveryStep):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise RuntimeError("step 2 fails")
            return super().training_step(batch, batch_idx)

    probe = SpeedProbe(warmup=5, sample_system=False)
    trainer = pl.Trainer(
        accelerator="gpu", devices=1, max_steps=12, callbacks=[probe], **QUIET_TRAINER
    )
    with pytest.raises(RuntimeError, match="step 2 fails"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Fails(step_s=0.0), known_cost_loader(n=400, batch_size=8))
    assert torch.cuda.get_sync_debug_mode() == 0
    assert probe.result().host_syncs["steps"] == 2  # step 1, then the failing step 2
