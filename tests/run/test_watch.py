"""speedlab.run.watch: snapshots of a run's records (MFU included, checked against a real
fit's result), and the steps a Trainer will run."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.labs.tabular import MLP
from speedlab.measure.flops import COUNT_TAIL, matmul_peak
from speedlab.results.run import empty_records
from speedlab.run.intercept import RunControls
from speedlab.run.sweep import plan_sweep, run_sweep
from speedlab.run.watch import _RECENT, WINDOW, LiveView, Snapshot, planned_steps, snapshot
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


def test_on_an_asynchronous_device_the_figures_are_the_settled_steps_and_progress_every_step() -> (
    None
):
    """Steps past ``settled`` still hold the host's figures (its queueing of the device's work)
    until the device's timeline is read: the figures and the chart leave them out."""
    records = records_of(150)
    for key, value in (("data_time", 0.0001), ("batch_time", 0.0005), ("wall", 0.0006)):
        records[key][100:] = [value] * 50
    s = snapshot(records, settled=100, total_steps=200)
    assert s.steps == 150  # the progress
    assert (s.data_time, s.batch_time) == pytest.approx((0.002, 0.008))
    assert s.samples_per_s == pytest.approx(8 / 0.010)
    assert s.eta == pytest.approx(50 * 0.010)
    assert s.first_step + len(s.batch_window) - 1 == 100
    assert set(s.batch_window) == {0.008}


def test_planned_steps_from_the_trainers_limits() -> None:
    assert planned_steps(pl.Trainer(max_steps=50, accumulate_grad_batches=2, **QUIET)) == 100
    assert planned_steps(pl.Trainer(max_epochs=3, **QUIET)) is None  # batches per epoch unknown yet
    trainer = pl.Trainer(max_epochs=2, **QUIET)
    trainer.fit(KnownCostModel(step_s=0.0), known_cost_loader(n=40, batch_size=8))
    assert planned_steps(trainer) == 10


def test_the_mfu_is_the_recent_samples_a_second_times_the_flops_a_sample_over_the_peak() -> None:
    s = snapshot(records_of(150), flops_per_sample=1e6, peak=1e10)
    assert s.mfu == pytest.approx(800 * 1e6 / 1e10)  # 800 samples/s (records_of): 8%
    assert snapshot(records_of(150), flops_per_sample=None, peak=1e10).mfu is None  # not counted
    assert snapshot(records_of(150), flops_per_sample=1e6, peak=None).mfu is None  # no peak
    assert snapshot(empty_records(), flops_per_sample=1e6, peak=1e10).mfu is None  # no step yet


def test_the_devices_split_comes_once_its_traced_step_says_how_long_it_worked() -> None:
    s = snapshot(records_of(150), device_busy=0.003)  # steps of 2 ms data, 8 ms batch
    split = s.device_split
    assert (split.busy, split.input, split.launches) == pytest.approx((0.003, 0.002, 0.005))
    assert snapshot(records_of(150)).device_split is None  # not traced (yet)
    assert snapshot(empty_records(), device_busy=0.003).device_split is None  # no step yet


class Drawn(LiveView):
    """A live view that keeps every state it is drawn."""

    live = True

    def __init__(self) -> None:
        self.states: list[Snapshot] = []

    def draw(self, state: Snapshot) -> None:
        self.states.append(state)


def test_a_real_fits_live_mfu_agrees_with_its_result_and_its_peak_comes_before_training() -> None:
    """The live MFU covers the last ``_RECENT`` steps, the result's the steady steps: with
    exactly ``_RECENT`` steady steps they are the same steps under the same rule, so the last
    snapshot's MFU is the result's to rounding. Earlier snapshots differ only by their
    samples/s (the same FLOPs a sample, the same peak): MFU over samples/s is one constant.
    A bound on the speeds themselves would measure the machine's noise, not this code."""
    warmup = 5
    view = Drawn()
    seen: dict[int, tuple[Snapshot, dict, int]] = {}  # at each step's start, in training

    class Look(pl.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            peak = dict(view.session.active_probe.peak)
            seen[batch_idx] = (view.state(), peak, matmul_peak.cache_info().misses)

    def train() -> None:
        loader = known_cost_loader(n=32 * 40, batch_size=32)
        model = MLP(features=8, classes=2, hidden=256)
        pl.Trainer(max_epochs=1, callbacks=[Look()], **QUIET).fit(model, loader)

    matmul_peak.cache_clear()  # so that this fit's setup measures the CPU's peak
    controls = RunControls(steps=warmup + _RECENT, warmup=warmup)
    run = run_sweep(train, plan_sweep({}, controls=controls), view=view, store=False).runs[0]
    first, peak, measured = seen[0]
    assert measured >= 1 and matmul_peak.cache_info().misses == measured  # none after step 1
    assert run.flops["peak"] == peak["peak"] > 0 and "measured" in peak["peak_source"]
    counted = warmup - 1 - COUNT_TAIL
    assert first.mfu is None and seen[counted][0].mfu is None  # the count is step 1's
    assert seen[counted + 1][0].mfu is not None
    last = view.states[-1]
    assert last.steps == run.steps == warmup + _RECENT
    assert last.mfu == pytest.approx(run.mfu, rel=1e-9) and 0 < run.mfu <= 1
    per_rate = run.mfu / run.samples_per_s
    live = [s for s in [*view.states, *(s for s, _, _ in seen.values())] if s.mfu is not None]
    assert [s.mfu / s.samples_per_s for s in live] == pytest.approx([per_rate] * len(live))
