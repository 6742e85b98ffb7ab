"""speedlab.run.watch: snapshots of a run's records, and the steps a Trainer will run."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.results.run import empty_records
from speedlab.run.watch import WINDOW, planned_steps, snapshot
from tests.records import records_of, sample

QUIET = dict(accelerator="cpu", **QUIET_TRAINER)


def test_snapshot_figures_progress_and_eta() -> None:
    s = snapshot(records_of(150), total_steps=200, elapsed=3.0, system=sample(87.0, 812_000_000, 2))
    assert s.steps == 150 and s.phase == "steady"
    assert s.samples_per_s == pytest.approx(8 / 0.010)
    assert (s.data_time, s.batch_time) == pytest.approx((0.002, 0.008))
    assert s.eta == pytest.approx(50 * 0.010)
    assert len(s.data_window) == WINDOW and s.first_step == 150 - WINDOW + 1
    assert (s.cpu_percent, s.rss_bytes, s.workers) == (87.0, 812_000_000, 2)


def test_snapshot_before_the_first_step_and_under_a_time_limit() -> None:
    s = snapshot(empty_records(), total_steps=None, elapsed=1.0, time_limit=10.0, phase="preload")
    assert (s.steps, s.phase, s.eta, s.data_window) == (0, "preload", 9.0, ())
    assert s.samples_per_s != s.samples_per_s  # NaN: nothing measured yet
    capped = snapshot(records_of(10), total_steps=10_000, elapsed=4.0, time_limit=5.0)
    assert capped.eta == pytest.approx(1.0)


def test_planned_steps_from_the_trainers_limits() -> None:
    assert planned_steps(pl.Trainer(max_steps=50, accumulate_grad_batches=2, **QUIET)) == 100
    assert planned_steps(pl.Trainer(max_epochs=3, **QUIET)) is None  # batches per epoch unknown yet
    trainer = pl.Trainer(max_epochs=2, **QUIET)
    trainer.fit(KnownCostModel(step_s=0.0), known_cost_loader(n=40, batch_size=8))
    assert planned_steps(trainer) == 10
