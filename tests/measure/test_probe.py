"""SpeedProbe: known-answer timings on real Lightning training with known-cost workloads."""

from __future__ import annotations

import collections
import csv
import gc
import inspect
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import lightning.pytorch as pl
import pytest
import torch

import speedlab.measure
from speedlab.labs import QUIET_TRAINER, KnownCostModel, busy_wait, known_cost_loader
from speedlab.measure.probe import SpeedProbe
from speedlab.measure.reading import Reader, SystemSample
from speedlab.measure.workload import loader_facts
from speedlab.results.run import RunResult
from speedlab.results.steady import steady
from tests.doctor_runs import require_quiet


def trainer(probe: SpeedProbe, package=pl, **kwargs) -> pl.Trainer:
    defaults = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    return package.Trainer(callbacks=[probe], **{**defaults, **kwargs})


def close_to(measured: float, truth: float, drift: float = 0.0) -> bool:
    """The acceptance tolerance: within 10% or 2 ms, whichever is larger, widened by how far
    the truth itself moved between two readings of it (``cost_around``)."""
    return abs(measured - truth) <= max(0.1 * truth, 0.002) + drift


QUIET_CORES = 0.3  # other processes' CPU during a timing test from this on: it cannot be judged


def skip_if_shared(result: RunResult) -> None:
    """Known answers need the machine to ourselves: wall-clock costs stretch when others run."""
    require_quiet(result, below=QUIET_CORES)


def loader_batch_cost(num_workers: int = 0, **loader_kw) -> float:
    """The true cost of a batch: the mean time between batches the same loader delivers to a
    consumer that does nothing else, without Lightning, after the workers' prefetched start.

    A mean, not a median: workers started together deliver their batches in bursts.
    """
    skip = 2 * num_workers + 3
    loader = known_cost_loader(
        n=8 * (skip + 20), batch_size=8, num_workers=num_workers, **loader_kw
    )
    arrivals = [time.perf_counter() for _ in loader]
    return (arrivals[-1] - arrivals[skip]) / (len(arrivals) - 1 - skip)


T = TypeVar("T")


def around(fit: Callable[[], T], truth: Callable[[], float]) -> tuple[T, float, float]:
    """What ``fit`` returns, with ``truth()`` read before and after it: their mean, the known
    answer, and their difference (the drift), by which the machine's failure to repeat it
    widens the bound. One reading can catch a stall or a slower spell: in the project's CI a
    loader's cost read 20.8 ms where the fit read 18.4 (a quiet machine here: 17.2 to 17.6 for
    both, before and after alike)."""
    before = truth()
    done = fit()
    after = truth()
    return done, (before + after) / 2, abs(after - before)


def cost_around(fit: Callable[[], T], **loader_kw) -> tuple[T, float, float]:
    """``around`` the fit, the truth the loader's batch cost (``loader_batch_cost``)."""
    return around(fit, lambda: loader_batch_cost(**loader_kw))


def two_ms_samples(model: pl.LightningModule, steps: int, *more: pl.Callback) -> SpeedProbe:
    """A probe on ``steps`` steps of ``model`` fed 8 samples a batch of 2 ms each, no workers,
    beside the callbacks ``more``."""
    probe = SpeedProbe(warmup=5)
    loader = known_cost_loader(n=4000, batch_size=8, sleep_s=0.002)
    t = trainer(probe, max_steps=steps)
    t.callbacks.extend(more)
    t.fit(model, loader)
    return probe


class Spans(pl.Callback):
    """Each training step's span by a stopwatch of its own, from Lightning's
    ``on_train_batch_start`` hook to its ``on_train_batch_end``: they enclose the batch's run
    (and the fetches of a step fed the loader's iterator) with little but Lightning's
    bookkeeping besides."""

    def __init__(self) -> None:
        self.spans: list[float] = []
        self._start = 0.0

    def on_train_batch_start(self, *_: object) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, *_: object) -> None:
        self.spans.append(time.perf_counter() - self._start)

    def beside(self, records: dict[str, list], fetched_inside: bool) -> list[float]:
        """Each steady step's span less what the probe put in the step (its batch_time, and its
        data_time where the step ``fetched_inside`` it): Lightning's bookkeeping around them,
        which a probe that left part of the step out, or counted some twice, would move by
        milliseconds (50 to 230 us a step here, 300 to 700 where a system reading fell in)."""
        data = records["data_time"] if fetched_inside else [0.0] * len(records["batch_time"])
        return [
            span - batch - fetched
            for span, batch, fetched, phase in zip(
                self.spans, records["batch_time"], data, records["phase"], strict=True
            )
            if phase == "steady"
        ]


def known_step(result: RunResult, spans: Spans, *, fetched_inside: bool = False) -> None:
    """The probe's batch_time of a step that busy-waits 10 ms: each steady step holds the 10
    ms, and with what it puts in the step sits inside the step's span by another stopwatch,
    less a little of Lightning's bookkeeping. The rest of such a step (forward, backward,
    optimizer) is no known answer in a fit of its own: on this VM on 2026-12-02 the zero-cost
    step after the same loader took 1.2 ms or 15 to 19 ms (1.0 ms every step with one torch
    thread): after each 16 ms sleep in the loader, the second torch thread's idle vCPU woke
    that late, a wait the 10 ms busy-wait hides."""
    records = result.records
    steady = [b for b, phase in zip(records["batch_time"], records["phase"]) if phase == "steady"]
    assert min(steady) >= 0.010, steady
    beside = spans.beside(records, fetched_inside)
    assert min(beside) >= 0 and statistics.median(beside) < 0.5e-3, beside


def test_known_answer_without_workers() -> None:
    spans = Spans()

    def fit() -> SpeedProbe:  # 8 x 2 ms, and what collating really costs
        return two_ms_samples(KnownCostModel(step_s=0.010), 40, spans)

    probe, truth, drift = cost_around(fit, sleep_s=0.002)
    result = probe.result()
    skip_if_shared(result)
    assert 0.016 <= truth < 0.016 * 1.35  # waking from each sleep costs a little too
    assert result.steps == 40
    assert close_to(result.data_time, truth, drift), (result.data_time, truth, drift)
    known_step(result, spans)
    assert result.samples == 40 * 8
    assert result.samples_per_s == pytest.approx(8 / result.step_time, rel=0.15)


def steady_waits(workers: int) -> tuple[float, float]:
    """Train the known-cost workload (4 ms a sample, 10 ms a step) with `workers` workers;
    the mean steady wait for data and the mean rest of the step."""
    probe = SpeedProbe(warmup=8)
    loader = known_cost_loader(n=4000, batch_size=8, sleep_s=0.004, num_workers=workers)
    trainer(probe, max_steps=48).fit(KnownCostModel(step_s=0.010), loader)
    result = probe.result()
    skip_if_shared(result)
    r = result.records
    steady = [i for i, phase in enumerate(r["phase"]) if phase == "steady"]
    waited = statistics.fmean(r["data_time"][i] for i in steady)
    busy = statistics.fmean(r["wall"][i] - r["data_time"][i] for i in steady)
    return waited, busy


@pytest.mark.usefixtures("one_compute_thread")
def test_one_worker_wait_is_what_the_arithmetic_predicts() -> None:
    # The worker delivers a batch every `period` (about 8 x 4 ms, measured on the same loader
    # without training) while the main process spends the rest of its step training: on
    # average it waits period - that rest. The period is measured before and after the run:
    # the known answer is only as exact as the machine repeats it (waking from 32 sleeps a
    # batch drifts by a millisecond or two between runs), so their difference widens the bound.
    (waited, busy), period, drift = cost_around(
        lambda: steady_waits(workers=1), num_workers=1, sleep_s=0.004
    )
    assert 0.032 <= period < 0.032 * 1.25
    expected = period - busy
    assert close_to(waited, expected, drift), (waited, expected, drift)


@pytest.mark.usefixtures("one_compute_thread")
def test_more_workers_bring_the_wait_toward_zero() -> None:
    # Arithmetic: each batch costs 32 ms and a step about 13 ms, so one worker leaves a wait of
    # about 19 ms, two about 3 ms and four none. What remains is each batch's hand-over from
    # its worker (unpickling, passing shared-memory file descriptors): a few ms on this machine.
    one, _ = steady_waits(workers=1)
    two, _ = steady_waits(workers=2)
    four, _ = steady_waits(workers=4)
    assert one > 0.015
    assert two < 0.5 * one
    assert four < 0.4 * one  # the loading cost is hidden; the hand-over is not


class Validated(KnownCostModel):
    def validation_step(self, batch, batch_idx):
        return None


class SlowEdges(KnownCostModel):
    """A step of 5 ms whose batch takes 6 ms to reach the device and whose
    ``on_train_batch_start`` takes 9 ms: the copy is the data's (the device waits for it), the
    hook neither the data's nor the batch's. Sleeps: the same on a busy machine."""

    def training_step(self, batch, batch_idx):
        time.sleep(0.005)
        return super().training_step(batch, batch_idx)

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        time.sleep(0.006)
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_train_batch_start(self, batch, batch_idx) -> None:
        time.sleep(0.009)


def test_data_time_ends_when_the_batch_is_on_the_device() -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    loader = known_cost_loader(n=8 * 20, batch_size=8)  # no wait of its own
    trainer(probe, max_steps=12).fit(SlowEdges(step_s=0.0), loader)
    steady_steps = [i for i, phase in enumerate(probe.records["phase"]) if phase == "steady"]
    data, batch, wall = (
        [probe.records[key][i] for i in steady_steps] for key in ("data_time", "batch_time", "wall")
    )
    # The copy's sleep is the data's, the step's the batch's; the wall holds the hook's beside
    # them, in neither figure. Lower bounds only: a busy machine stretches torch's work.
    assert min(data) >= 0.006 and min(batch) >= 0.005, (data, batch)
    assert all(w - d - b >= 0.009 for w, d, b in zip(wall, data, batch)), (wall, data, batch)


class ManualSteps(KnownCostModel):
    """The known-cost step with its optimizer stepped by hand (Lightning's manual loop)."""

    def __init__(self, step_s: float) -> None:
        super().__init__(step_s=step_s)
        self.automatic_optimization = False

    def training_step(self, batch, batch_idx):
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss = super().training_step(batch, batch_idx)
        self.manual_backward(loss)
        optimizer.step()
        return loss


def test_manual_optimization_steps_are_measured_like_automatic_ones() -> None:
    probe = SpeedProbe(warmup=2, sample_system=False)
    loader = known_cost_loader(n=8 * 12, batch_size=8, sleep_s=0.001)
    t = trainer(probe, max_steps=10)
    t.fit(ManualSteps(step_s=0.005), loader)
    result = probe.result()
    assert result.steps == 10 and result.samples == 10 * 8
    # Lower bounds only (a busy machine stretches both): 8 x 1 ms of loading, 5 ms of step.
    assert min(result.records["data_time"][2:]) >= 0.008, result.records["data_time"]
    assert min(result.records["batch_time"][2:]) >= 0.005, result.records["batch_time"]
    assert result.final_loss is not None
    assert lightning_leftovers(t) == {}


def test_phases_warmup_epoch_start_and_validation() -> None:
    probe = SpeedProbe(warmup=3, sample_system=False)
    train = known_cost_loader(n=80, batch_size=8)  # 10 steps an epoch
    val = known_cost_loader(n=16, batch_size=8, sleep_s=0.01)  # ~0.16 s per validation
    trainer(probe, max_epochs=2, num_sanity_val_steps=0).fit(Validated(step_s=0.001), train, val)
    result = probe.result()
    phases = result.records["phase"]
    assert phases[:3] == ["epoch_start", "warmup", "warmup"]
    assert phases[10] == "epoch_start"
    assert phases.count("steady") == 20 - 4
    assert result.records["epoch"][9:11] == [0, 1]
    assert 0.25 <= result.phases["validation"] <= 0.6
    # validation is not charged to any step's wall time
    assert max(result.records["wall"]) < 0.1


def lightning_leftovers(t: pl.Trainer) -> dict[str, set[str]]:
    """The probe's wrappers still on the trainer's objects after a fit (none, if taken off)."""
    loop = t.fit_loop.epoch_loop
    objects = {
        "loop": (loop, {"_on_before_fetch", "_on_after_fetch"}),
        "strategy": (t.strategy, {"batch_to_device"}),
        "automatic": (loop.automatic_optimization, {"run"}),
        "manual": (loop.manual_optimization, {"run"}),
        "profiler": (t.profiler, {"start", "stop"}),
    }
    return {
        name: set(vars(o)) & names for name, (o, names) in objects.items() if set(vars(o)) & names
    }


def test_user_profiler_keeps_every_action() -> None:
    probe = SpeedProbe(sample_system=False)
    t = trainer(probe, max_steps=12, profiler="simple")
    t.fit(KnownCostModel(step_s=0.001), known_cost_loader(n=400, batch_size=8))
    actions = t.profiler.recorded_durations
    assert len(actions["run_training_batch"]) == 12
    assert len(actions["[_TrainingEpochLoop].train_dataloader_next"]) >= 12
    assert lightning_leftovers(t) == {}
    assert probe.result().steps == 12
    # No per-step hook is dispatched to the probe: each would cost a profiler context a step.
    per_step = [a for a in actions if a.startswith("[Callback]SpeedProbe.on_") and "batch" in a]
    assert per_step == [] and "[Callback]SpeedProbe.on_after_backward" not in actions


def test_two_probes_on_one_trainer_each_record_every_step_and_both_come_off() -> None:
    """The second probe's wrappers go over the first's; the first ends first and its own pass
    calls on; once both have ended nothing of either is left on the trainer's objects."""
    first, second = SpeedProbe(warmup=2, sample_system=False), SpeedProbe(warmup=2)
    t = trainer(first, max_steps=12)
    t.callbacks.append(second)
    t.fit(KnownCostModel(step_s=0.002), known_cost_loader(n=80, batch_size=8, sleep_s=0.0005))
    for probe in (first, second):
        r = probe.result().records
        assert r["samples"] == [8] * 10 + [8, 8], r["samples"]  # ten a loader, then two more
        assert all(b >= 0.002 for b in r["batch_time"]), r["batch_time"]
        assert all(d >= 0.004 for d in r["data_time"][1:]), r["data_time"]
    assert lightning_leftovers(t) == {}


FETCH = "[_TrainingEpochLoop].train_dataloader_next"


class NormalisedOnTransfer(KnownCostModel):
    """Its own work on each batch once moved (2 ms): the data's, as the copy would be."""

    def on_after_batch_transfer(self, batch, dataloader_idx):
        time.sleep(0.002)
        return batch


@pytest.mark.parametrize(
    ("model", "in_place"),
    [(KnownCostModel, (True, True)), (NormalisedOnTransfer, (True, False))],
)
def test_fetch_edges_lightning_does_nothing_at_are_stamped_in_their_place(
    model, in_place, monkeypatch
) -> None:
    """Lightning's calls at a fetch's edges only start and stop its default profiler, which
    does nothing: the probe's stamps run in their place, and the profiler is not called. On
    the CPU the batch is there as its fetch ends, unless a hook of the user's works on it
    after: then Lightning's call at the fetch's end stays, and the wait runs to the end of
    ``batch_to_device``, the hook's work included."""
    calls: collections.Counter[str] = collections.Counter()
    for edge in ("start", "stop"):
        monkeypatch.setattr(
            pl.profilers.PassThroughProfiler,
            edge,
            lambda self, name, e=edge: calls.update([e] if name == FETCH else []),
        )
    probe = SpeedProbe(warmup=2, sample_system=False)
    t = trainer(probe, max_steps=10)
    t.fit(model(step_s=0.0), known_cost_loader(n=400, batch_size=8, sleep_s=0.001))
    # before the probe's taps: the first fetch, at the epoch's start
    assert (calls["start"] <= 1, calls["stop"] <= 1) == in_place, calls
    r = probe.result().records
    hook = 0.002 if model is NormalisedOnTransfer else 0.0
    assert min(r["data_time"][1:]) >= 0.008 + hook, r["data_time"]  # 8 x 1 ms, and the hook
    assert lightning_leftovers(t) == {}


PROBE = str(Path(speedlab.measure.__file__).parent)  # the lab's model and data are not its


class StepCalls(pl.Callback):
    """Counts the calls the training thread makes in steps ``start`` to ``stop``: Python
    functions by (file, name), and the C functions the probe's frames call, by name. The
    garbage collector waits meanwhile: what it would run (finalizers) comes when it comes."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self.python: collections.Counter[tuple[str, str]] = collections.Counter()
        self.from_probe: collections.Counter[str] = collections.Counter()
        self.packed: set[str] = set()  # the probe's frames that take their arguments as *args

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == self.start:
            gc.disable()
            sys.setprofile(self._count)
        elif batch_idx == self.stop:
            self.done()

    def done(self) -> None:
        sys.setprofile(None)
        gc.enable()

    def _count(self, frame, event, arg) -> None:
        code = frame.f_code
        if event == "call":
            self.python[code.co_filename, code.co_name] += 1
            if PROBE in code.co_filename and code.co_flags & inspect.CO_VARARGS:
                self.packed.add(code.co_name)
        elif event == "c_call" and PROBE in code.co_filename:
            self.from_probe[arg.__name__] += 1


def test_a_steady_step_runs_less_python_than_without_the_probe() -> None:
    """The training path only stamps the clock: per steady step on the CPU, the probe's own
    Python is three frames, a stamp at each of the fetch's edges (in the place of the four
    frames of Lightning's profiler calls there) and its wrapper of the training call, which
    appends the batch's start and end; it calls into C for the clock and the append alone, and
    takes Lightning's arguments as they come (no ``*args`` tuple). Counted, not timed: a count
    no noisy machine moves."""
    window = range(20, 120)
    counts = {}
    for arm in ("bare", "probe"):
        calls = StepCalls(window.start, window.stop)
        probe = SpeedProbe(log_every_n_steps=1000, sample_system=False)
        callbacks = [calls, probe] if arm == "probe" else [calls]
        t = pl.Trainer(callbacks=callbacks, max_steps=130, accelerator="cpu", **QUIET_TRAINER)
        try:
            t.fit(KnownCostModel(step_s=0.0), known_cost_loader(n=8 * 130, batch_size=8))
        finally:
            calls.done()
        counts[arm] = calls
    steps = len(window)
    ours = {name: n for (file, name), n in counts["probe"].python.items() if PROBE in file}
    assert ours == {"fetch_starts": steps, "moves": steps, "trains": steps}
    assert counts["probe"].from_probe == {"perf_counter": 4 * steps, "append": 4 * steps}
    assert counts["probe"].packed == set()
    bare, probed = (sum(counts[arm].python.values()) for arm in ("bare", "probe"))
    assert probed <= bare - steps, (bare / steps, probed / steps)


def test_works_with_pytorch_lightning_imports() -> None:
    import pytorch_lightning as ptl

    class Model(ptl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(8, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.layer(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    probe = SpeedProbe(sample_system=False)
    trainer(probe, package=ptl, max_steps=10).fit(Model(), known_cost_loader(n=200, batch_size=8))
    assert probe.result().steps == 10


def test_logs_data_and_batch_time_to_the_loggers(tmp_path: Path) -> None:
    probe = SpeedProbe(log_every_n_steps=5, sample_system=False)
    logger = pl.loggers.CSVLogger(tmp_path, name="run")
    t = trainer(probe, max_steps=20, logger=logger)
    t.fit(KnownCostModel(step_s=0.002), known_cost_loader(n=400, batch_size=8, sleep_s=0.001))
    with open(Path(logger.log_dir) / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    data = [float(r["speedlab/data_time"]) for r in rows if r.get("speedlab/data_time")]
    # Each logged figure is the probe's own for the 5 steps before it, under the one rule,
    # and at least the loader's 8 sleeps of 1 ms (a busy machine wakes a sleeper late).
    records = probe.result().records
    assert data == pytest.approx(
        [steady(records, range(end - 5, end), 0).data_time for end in (5, 10, 15, 20)], rel=0.01
    )
    assert min(data) >= 0.008
    assert len(probe.result().losses) == 4


def test_the_losses_are_those_of_the_last_step_that_returned_one() -> None:
    class SkipsOddSteps(KnownCostModel):
        """Returns the step's index as its loss on even steps; odd steps skip (None)."""

        def training_step(self, batch, batch_idx):
            loss = super().training_step(batch, batch_idx)
            return loss * 0 + batch_idx if batch_idx % 2 == 0 else None

    probe = SpeedProbe(log_every_n_steps=3, sample_system=False)
    trainer(probe, max_steps=10).fit(SkipsOddSteps(step_s=0.0), known_cost_loader(n=200))
    result = probe.result()
    # logged at steps 2, 5 and 8: step 5 skipped, so step 4's loss stands there
    assert result.losses == [(2, 2.0), (5, 4.0), (8, 8.0)]
    assert result.final_loss == 8.0  # step 9 skipped


def test_two_probes_on_one_trainer_both_measure_and_leave_nothing_behind() -> None:
    first, second = SpeedProbe(sample_system=False), SpeedProbe(sample_system=False)
    t = pl.Trainer(callbacks=[first, second], max_steps=12, accelerator="cpu", **QUIET_TRAINER)
    t.fit(KnownCostModel(step_s=0.001), known_cost_loader(n=400, batch_size=8))
    assert first.result().steps == second.result().steps == 12
    assert lightning_leftovers(t) == {}


def test_a_probe_attached_mid_epoch_measures_the_steps_after_and_takes_its_taps_off() -> None:
    probe = SpeedProbe(warmup=0, sample_system=False)
    held: dict[str, object] = {}

    class Attach(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if batch_idx == 4:  # the fetcher holds the loop's own methods by now
                held["fetcher"] = trainer.fit_loop._data_fetcher
                trainer.callbacks.append(probe)
                probe.setup(trainer, pl_module, "fit")
                probe.on_train_start(trainer, pl_module)

    t = trainer(Attach(), max_steps=12)
    t.fit(KnownCostModel(step_s=0.002), known_cost_loader(n=400, batch_size=8))
    result = probe.result()
    assert result.steps == 7  # steps 5 to 11
    assert len(set(result.records["t"])) == 7  # each from its own fetch: the fetcher re-pointed
    assert min(result.records["batch_time"]) >= 0.002
    assert lightning_leftovers(t) == {}
    loop = t.fit_loop.epoch_loop
    assert held["fetcher"]._start_profiler == loop._on_before_fetch  # the loop's own again
    assert held["fetcher"]._stop_profiler == loop._on_after_fetch


def test_exception_keeps_partial_result_and_unwraps_profiler() -> None:
    class Failing(KnownCostModel):
        def training_step(self, batch, batch_idx):
            if batch_idx == 9:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    before = list(gc.callbacks)
    probe = SpeedProbe(sample_system=False)
    t = trainer(probe, max_steps=30)
    with pytest.raises(RuntimeError, match="boom"):
        t.fit(Failing(step_s=0.001), known_cost_loader(n=400, batch_size=8))
    assert probe.result().steps == 9
    assert isinstance(probe.exception, RuntimeError)
    assert lightning_leftovers(t) == {}
    assert gc.callbacks == before  # the full collections' watch is off again


def test_compiled_model_marks_its_first_step_as_compile() -> None:
    probe = SpeedProbe(warmup=2, sample_system=False, compiled=True)
    trainer(probe, max_steps=6).fit(
        KnownCostModel(step_s=0.001), known_cost_loader(n=100, batch_size=8)
    )
    assert probe.result().records["phase"][:3] == ["compile", "warmup", "steady"]


def test_system_sampler_runs_with_the_fit() -> None:
    probe = SpeedProbe()
    trainer(probe, max_steps=30).fit(
        KnownCostModel(step_s=0.01), known_cost_loader(n=400, batch_size=8)
    )
    system = probe.result().system
    assert system.samples >= 2
    assert system.peak_rss_bytes > 50e6
    assert system.main_cpu_percent > 30  # the busy-waiting step keeps one core busy


def test_the_fits_due_system_readings_fall_between_its_steps(monkeypatch) -> None:
    """The thread that trains takes the sampler's due readings between a step's end and the
    next one's fetch (``SystemSampler.read_if_due``): in a step's wall, as any work of the fit
    between steps, and in neither its data_time nor its batch_time."""
    taken, read = [], Reader.read

    def timed(self: Reader, every_worker: bool = False, walk: bool = True) -> SystemSample:
        start = time.perf_counter()
        sample = read(self, every_worker, walk)
        if not walk:  # the training path's readings: the sampler's thread walks pages
            taken.append((threading.current_thread(), start, time.perf_counter()))
        return sample

    monkeypatch.setattr(Reader, "read", timed)
    probe = SpeedProbe(warmup=2)
    trainer(probe, max_steps=100).fit(
        KnownCostModel(step_s=0.01), known_cost_loader(n=1000, batch_size=8)
    )
    r, t0 = probe.records, probe._steps.t0
    assert len(taken) >= 2  # a second of steps, four readings a second
    for thread, start, end in taken:
        assert thread is threading.current_thread()
        i = max(i for i, t in enumerate(r["t"]) if t0 + t <= start)
        assert t0 + r["t"][i] + r["wall"][i] >= end  # in this step's wall
        assert r["wall"][i] - r["data_time"][i] - r["batch_time"][i] >= end - start


class SlowFirstStep(KnownCostModel):
    """Its first step computes 0.5 s longer: a one-time cost, as a full garbage collection of a
    large heap (0.2-0.4 s in the test process)."""

    def training_step(self, batch, batch_idx):
        if batch_idx == 0:
            busy_wait(0.5)
        return super().training_step(batch, batch_idx)


def test_the_cpu_figures_leave_out_a_one_time_cost_of_the_warm_up() -> None:
    """The training thread's CPU is read over the steady steps, like every step figure: a
    sleeping loader's run whose first step burns 0.5 s shows the thread about as busy as its
    steady steps' compute."""
    probe = SpeedProbe(warmup=2)
    loader = known_cost_loader(n=480, batch_size=8, sleep_s=0.002)
    trainer(probe, max_steps=60).fit(SlowFirstStep(step_s=0.005), loader)
    result = probe.result()
    skip_if_shared(result)
    thread = result.system.train_thread_cpu_percent
    if thread is None:
        pytest.skip("the OS does not report a thread's CPU time")
    records, steps = result.records, result.steady.steps
    compute = sum(records["batch_time"][i] for i in steps) / sum(records["wall"][i] for i in steps)
    # Beyond the compute: the loader's spun wake-ups (a tenth of its wait) and Lightning's work
    # between steps, 0.11-0.13 here; with the first step's 0.5 s counted it read 0.26.
    assert compute - 0.05 < thread / 100 < compute + 0.19, (thread, compute)


def test_too_short_a_run_says_so() -> None:
    probe = SpeedProbe(warmup=5, sample_system=False)
    trainer(probe, max_steps=3).fit(
        KnownCostModel(step_s=0.001), known_cost_loader(n=100, batch_size=8)
    )
    result = probe.result()
    assert result.steps == 3
    assert any("no steady state" in note for note in result.notes)


def test_result_before_any_fit_explains() -> None:
    with pytest.raises(RuntimeError, match="has not watched a fit"):
        SpeedProbe().result()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"warmup": -1}, r"SpeedProbe\(warmup=-1\)"),
        ({"log_every_n_steps": 0}, r"log_every_n_steps=0"),
    ],
)
def test_bad_arguments_are_quoted_back(args: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SpeedProbe(**args)


class FirstOfTwo(KnownCostModel):
    def training_step(self, batch, batch_idx):
        return super().training_step(batch["a"], batch_idx)


def test_the_loaders_workers_are_recorded_from_the_loaders_not_counted_from_processes() -> None:
    probe = SpeedProbe(sample_system=False)
    loaders = {"a": known_cost_loader(n=64, num_workers=1), "b": known_cost_loader(n=64)}
    trainer(probe, max_steps=3).fit(FirstOfTwo(), train_dataloaders=loaders)
    assert loader_facts(loaders)["loader_workers"] == 1
    # 64 samples in batches of 8: 8 steps an epoch; max_steps=3 is the whole fit's plan.
    workload = probe.result().workload
    assert {k: workload[k] for k in ("loader_workers", "epoch_steps", "planned_steps")} == {
        "loader_workers": 1,
        "epoch_steps": 8,
        "planned_steps": 3,
    }
    # The loaders agree on their batch size and on pinning nothing: both are facts of the run.
    assert workload["loader_batch_size"] == 8 and workload["loader_pin_memory"] is False
    assert workload["precision"] == "32-true" and workload["devices"] == 1
    assert probe.result().loader_workers() == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_cuda_batch_time_from_events() -> None:
    class Gpu(KnownCostModel):
        def training_step(self, batch, batch_idx):
            a = torch.randn(2048, 2048, device=self.device)
            for _ in range(20):
                a = a @ a / 2048
            return super().training_step(batch, batch_idx) + a.mean() * 0

    probe = SpeedProbe(sample_system=False)
    trainer(probe, accelerator="gpu", max_steps=20).fit(
        Gpu(step_s=0.0), known_cost_loader(n=400, batch_size=8)
    )
    result = probe.result()
    assert result.device == "cuda"
    assert all(b > 0 for b in result.records["batch_time"])


def test_import_speedlab_loads_no_torch() -> None:
    code = (
        "import sys, time; t = time.perf_counter(); import speedlab; "
        "print(time.perf_counter() - t, 'torch' in sys.modules, 'lightning' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    seconds, torch_loaded, lightning_loaded = out.stdout.split()
    assert torch_loaded == "False" and lightning_loaded == "False"
    assert float(seconds) < 0.3


class FedTheIterator(KnownCostModel):
    """The known-cost step taking the loader's iterator: it fetches its own batch."""

    def training_step(self, dataloader_iter):
        batch, batch_idx, _ = next(dataloader_iter)
        return super().training_step(batch, batch_idx)


class FetchesTwo(KnownCostModel):
    """Fed the loader's iterator, a step fetches two batches, or one where the loader runs out."""

    def training_step(self, dataloader_iter):
        batch, batch_idx, _ = next(dataloader_iter)
        second = next(dataloader_iter, None)
        x, y = batch if second is None else (torch.cat(p) for p in zip(batch, second[0]))
        return super().training_step((x, y), batch_idx)


class Stream(torch.utils.data.IterableDataset):
    """40 samples with no length: the fetch after the last batch finds the loader spent."""

    def __iter__(self):
        return iter(list(zip(torch.randn(40, 8), torch.randint(0, 2, (40,)))))


@pytest.mark.parametrize("dataset", ["sized", "stream"])
def test_a_step_fed_the_iterator_counts_the_samples_of_each_batch_it_fetched(dataset) -> None:
    """The fetcher keeps only its last batch: a step fetching two counted the second's samples
    alone. Five batches of 8 an epoch: steps of 16, 16 and 8 samples, in each of two epochs."""
    loader = (
        known_cost_loader(n=40, batch_size=8)
        if dataset == "sized"
        else torch.utils.data.DataLoader(Stream(), batch_size=8)
    )
    probe = SpeedProbe(warmup=0, sample_system=False)
    trainer(probe, max_epochs=2).fit(FetchesTwo(step_s=0.0), loader)
    records = probe.result().records
    assert records["samples"] == [16, 16, 8] * 2
    assert records["epoch"] == [0, 0, 0, 1, 1, 1]


def test_steps_fed_the_loaders_iterator_wait_for_the_fetches_inside_them() -> None:
    """``training_step(self, dataloader_iter)`` fetches inside the step: the fetch is its
    data_time, the rest its batch_time (it was counted as batch_time, data_time below zero)."""
    spans = Spans()
    probe, truth, drift = cost_around(
        lambda: two_ms_samples(FedTheIterator(step_s=0.010), 30, spans), sleep_s=0.002
    )
    result = probe.result()
    skip_if_shared(result)
    assert result.steps == 30 and result.samples == 30 * 8
    assert min(result.records["data_time"]) >= 0.016, result.records["data_time"]
    assert close_to(result.data_time, truth, drift), (result.data_time, truth, drift)
    known_step(result, spans, fetched_inside=True)  # in data_time, not in batch_time
    r = result.records  # each step's wall runs from its start to the next one's
    assert all(w >= d + b for w, d, b in zip(r["wall"], r["data_time"], r["batch_time"]))
    assert sum(r["wall"][5:-1]) == pytest.approx(r["t"][-1] - r["t"][5], rel=1e-9)


def test_a_probe_whose_taps_fail_to_come_off_still_stops_its_sampler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of the probe's ends runs whatever an earlier one raised: a sampler left running
    would read the process for the rest of its life."""
    import threading

    from speedlab.measure.taps import Taps

    def fails(self: Taps) -> None:
        raise RuntimeError("taps stuck")

    monkeypatch.setattr(Taps, "remove", fails)
    probe = SpeedProbe(warmup=1)
    with pytest.raises(RuntimeError, match="taps stuck"):
        trainer(probe, max_steps=3).fit(KnownCostModel(step_s=0.0), known_cost_loader(n=40))
    assert probe.sampler is not None
    assert "speedlab-system-sampler" not in [t.name for t in threading.enumerate()]
