"""The probe's full garbage collections in a real fit: each charged to the step it ran in, named
as a pause, and the callback gone after the fit (after an error: test_probe's exception test);
known answers from collections the test runs itself (speedlab.measure.heap, .steps)."""

from __future__ import annotations

import gc
import time

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.probe import SpeedProbe


def big_heap(collection_s: float = 0.05) -> list[list[int]]:
    """Objects enough that a full collection takes ``collection_s`` at least on this machine
    (a pause by itself, at ``PAUSE_MIN_S`` of 20 ms): 200 thousand at a time."""
    heap: list[list[int]] = []
    while len(heap) < 5_000_000:
        heap += [[i] for i in range(200_000)]
        start = time.perf_counter()
        gc.collect()
        if time.perf_counter() - start >= collection_s:
            break
    return heap


class CollectAt(pl.Callback):
    """Runs a full collection of a heap made big on purpose inside step ``step``'s training
    batch, and keeps how long ``gc.collect()`` took, callbacks and all: the known answer."""

    def __init__(self, step: int) -> None:
        self.step, self.took = step, 0.0
        self.heap = big_heap()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.step:
            start = time.perf_counter()
            gc.collect()
            self.took = time.perf_counter() - start


def fit_collecting(step: int, **model) -> tuple[SpeedProbe, CollectAt]:
    probe, collect = SpeedProbe(warmup=5, sample_system=False), CollectAt(step)
    gc.collect()  # the heap's growth counted from here: no collection of CPython's own in the fit
    t = pl.Trainer(callbacks=[collect, probe], max_steps=40, accelerator="cpu", **QUIET_TRAINER)
    t.fit(KnownCostModel(**model), known_cost_loader(n=400, batch_size=8))
    return probe, collect


def test_a_collection_in_a_fit_is_charged_to_its_step_and_named_a_pause() -> None:
    """A step of 30 ms, a collection of 50 ms or more: left out by what it is, however many
    steps long it is."""
    before = list(gc.callbacks)
    probe, collect = fit_collecting(25, step_s=0.030)
    result = probe.result()
    gc_time = result.records["gc_time"]
    assert gc.callbacks == before
    assert collect.took >= 0.02  # long enough to be a pause: the heap was made big for that
    assert gc_time[25] == pytest.approx(collect.took, rel=0.05)
    assert sum(gc_time) == gc_time[25]  # no other step's
    (pause,) = result.steady.pauses
    assert (pause.step, pause.collected) == (25, gc_time[25])
    assert 25 not in result.steady.steps
    assert result.records["wall"][25] >= 0.030 + collect.took


def test_a_collection_in_validation_is_not_its_steps() -> None:
    class Validating(KnownCostModel):
        def validation_step(self, batch, batch_idx):
            return None

    collect, probe = CollectAt(step=-1), SpeedProbe(warmup=5, sample_system=False)

    class CollectInValidation(pl.Callback):
        def on_validation_start(self, trainer, pl_module) -> None:
            if trainer.global_step == 20:
                collect.on_train_batch_start(trainer, pl_module, None, -1)

    t = pl.Trainer(
        callbacks=[probe, CollectInValidation()],  # validation starts for the probe first
        max_steps=30,
        val_check_interval=10,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        accelerator="cpu",
        **QUIET_TRAINER,
    )
    loader = known_cost_loader(n=400, batch_size=8)
    t.fit(Validating(step_s=0.002), loader, known_cost_loader(n=16, batch_size=8))
    assert collect.took > 0
    assert sum(probe.result().records["gc_time"]) == 0.0
