"""SpeedProbe: the Lightning Callback that measures data_time and batch_time of every step.

Timing points come from the calls Lightning's fit loop makes every step: the epoch loop's
``_on_before_fetch`` and ``_on_after_fetch`` around a batch's fetch, the strategy's
``batch_to_device``, and the optimization loop's ``run`` (``run_training_batch``). The probe
wraps each on the trainer's own loop and strategy for the fit (``speedlab.measure.path``, by
``speedlab.measure.taps``):
nothing of the user's is touched, and a step costs no callback hook and no profiler context.
Where a fetch's edge only drives the default profiler, which does nothing, the stamp takes its
place (``speedlab.measure.compat.quiet_fetch``). The path only stamps the clock into the step
log (``speedlab.measure.steps``, which builds the records on reading): no tensor allocation,
no ``.item()``, no synchronize.

- data_time: from the fetch start (the epoch's start for its first step: worker start-up) to
  the end of ``batch_to_device`` (loader wait + host-to-device transfer). On a device that
  computes in the host's memory (the CPU) with nothing but Lightning's bookkeeping between
  (``compat.batch_untouched``), the batch is there as its fetch ends: the wait ends there.
- batch_time: the ``run_training_batch`` span; wall: to the next step's start, less validation.
- A step fed the loader's iterator fetches inside that span: its fetches are its data_time
  (``speedlab.measure.steps``).
- samples: the loader's batch size where torch's own batching fixes it, the loader's last batch
  sized as it comes (``workload.full_batch``); elsewhere each batch's (``batch_size_of``).

On an asynchronous device each stamp is an event in its queue too, read a few times a second: the
device's stamps replace the host's figures by the same rules (``devices.events``). data_time
is then its idle time for want of input, copy included (``copy_time``); ``host_data_time`` the
host's wait. Warm-up steps carry the watches (``watches``); devices differ by ``device_for``."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from typing import Any

from speedlab.measure.compat import callback_bases
from speedlab.measure.devices import device_for
from speedlab.measure.devices.events import Timeline
from speedlab.measure.flops import counted_step, peak_of
from speedlab.measure.numerics import matmul_precision
from speedlab.measure.path import attach
from speedlab.measure.ranks import RankRecorder
from speedlab.measure.steps import StepLog
from speedlab.measure.system import SystemSampler
from speedlab.measure.taps import Taps
from speedlab.measure.unlisted import UnlistedInSteps
from speedlab.measure.watches import WarmupWatches
from speedlab.measure.workload import workload_of
from speedlab.results.run import Phase, RunResult
from speedlab.results.steady import steady
from speedlab.results.system import SystemSummary

_perf = time.perf_counter


class _SpeedProbeCore:
    """Measurement logic of SpeedProbe; combined below with every installed Callback base."""

    def __init__(
        self,
        warmup: int = 5,
        log_every_n_steps: int = 50,
        *,
        sample_system: bool = True,
        compiled: bool | None = None,
        own_max_steps: int | None = None,
    ) -> None:
        for name, value, least in (
            ("warmup", warmup, 0),
            ("log_every_n_steps", log_every_n_steps, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(
                    f"`SpeedProbe({name}={value!r})` is not valid. Expected an integer >= {least}."
                )
        self.warmup = warmup
        self.log_every_n_steps = log_every_n_steps
        self.own_max_steps = own_max_steps
        self.sample_system = sample_system
        self.compiled = compiled
        self._steps = StepLog(0.0)
        self.peak: dict[str, Any] = {}  # the device's peak FLOP/s for this fit (setup)
        self._watches = WarmupWatches()
        self.sampler: SystemSampler | None = None
        self._result: RunResult | None = None
        self._taps = Taps()
        self._off: Any = lambda: None  # turns the fit's wrappers into ones that pass calls on
        self._last: tuple[int, int] | None = None  # the loader's batches, its last's samples
        self._active = False
        self.exception: BaseException | None = None
        self.distributed = RankRecorder()  # per-rank records, sync time (speedlab.measure.ranks)

    # -- life cycle -------------------------------------------------------------------------

    def _reset(self, pl_module: Any) -> None:
        self.phases = {Phase.setup: 0.0, Phase.validation: 0.0}
        self._result = None
        self.exception = None
        self._t0 = _perf()
        compiled = (
            self.compiled
            if self.compiled is not None
            else getattr(pl_module, "_compiler_ctx", None) is not None
        )
        self._steps = StepLog(self._t0, self.warmup, compiled)
        self._val_start = 0.0
        self._loaders: Any = None  # a dict or list of training loaders, if several
        self._workload: dict[str, Any] = {}
        self._losses: list[tuple[int, Any]] = []
        self._trained: list[Any] = [None]  # the outputs of the last step that had any
        self._timeline: Timeline | None = None
        self._watches = WarmupWatches()
        self._sync_step: Any = None  # a rank's sync timer's close_step, in a distributed fit
        self._active = True

    def _finish(self) -> None:
        if not self._active:
            return
        try:
            self._close_step(_perf())
            if self._timeline is not None:
                self._timeline.resolve(self.records, wait=True)
        except Exception:
            # A failed device stays failed (its errors can be sticky): the user's own error is
            # the one to see, and the steps keep the host's figures.
            if self.exception is None:
                raise
        finally:  # each stops whatever an earlier one raised; the last registered first
            with contextlib.ExitStack() as stop:
                stop.callback(self._watches.close)  # the debug mode and the trace's settings
                if self.sampler is not None:
                    stop.callback(self.sampler.stop)
                stop.callback(self._steps.heap.stop)
                stop.callback(self._taps.remove)
                stop.callback(self._off)
        self._active = False
        self._result = self.distributed.finish(self._build_result(), self.exception)

    def _close_step(self, now: float) -> None:
        if self._timeline is not None:
            self._timeline.close()
        self._steps.close(now)

    def _after_step(self, end: float) -> None:
        """After each step (its training batch ended at ``end``) on a device with a timeline,
        or in a rank timing its syncs."""
        if self._timeline is not None and self._timeline.due(end, len(self._steps.steps)):
            self._timeline.resolve(self.records)
        if self._sync_step is not None:
            self._sync_step()

    @property
    def records(self) -> dict[str, list]:
        """The step records so far, from any thread (``StepLog.flush``)."""
        return self._steps.flush()

    # -- Lightning hooks --------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        self.distributed.one_thread_if_forked(trainer)
        precision = str(getattr(trainer, "precision", ""))
        self._settings = {"precision": precision, "matmul": matmul_precision()}
        self.peak = self._peak_before_training(trainer, pl_module)
        self._reset(pl_module)
        if self.sample_system:
            self.sampler = SystemSampler()
            self.sampler.start()

    def _peak_before_training(self, trainer: Any, pl_module: Any) -> dict[str, Any]:
        """The device's peak FLOP/s in this fit's settings (``peak_of``), before its first step
        (a CPU's is measured by a matmul, which mid-fit would slow the training and itself);
        empty where no step is counted, and in a rank process (its launcher reads it after)."""
        if self.distributed.in_child or self._counted_step(pl_module) is None:
            return {}
        return peak_of(device_for(trainer.strategy.root_device.type), self._settings)

    def _counted_step(self, pl_module: Any) -> int | None:
        counts = device_for(str(pl_module.device.type)).counts_flops
        return counted_step(pl_module, self.warmup, self.compiled, counts)

    @property
    def flops_per_sample(self) -> float | None:
        """FLOPs a sample of the counted step, once counted (``FlopWatch.per_sample``)."""
        return self._watches.flops.per_sample(self.records["samples"])

    @property
    def device_busy(self) -> float | None:
        """Seconds the device worked in its traced warm-up step, once traced (for the live
        view's split of a step); None before, or where the device keeps no trace."""
        return getattr(self._watches.busy, "busy", None)

    @property
    def settled(self) -> int | None:
        """Steps whose records hold the device timeline's figures (shown live); None: all."""
        return self._timeline.settled() if self._timeline is not None else None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if not self._active:
            return
        self.phases[Phase.setup] = _perf() - self._t0 - self.phases[Phase.validation]
        loaders = getattr(trainer, "train_dataloader", None)
        self._loaders = loaders if isinstance(loaders, (Mapping, list, tuple)) else None
        self._workload = {**workload_of(trainer, self.own_max_steps), **self._settings}
        self.device = str(pl_module.device.type)
        device = device_for(self.device)
        self._timeline = device.timeline(self.warmup)
        if self._timeline is not None:
            self.records.update(host_data_time=[], copy_time=[])
        self._watches = WarmupWatches(device, self.warmup, self._counted_step(pl_module))
        self.distributed.start(trainer, lambda error: self.on_exception(trainer, pl_module, error))
        self._sync_step = getattr(self.distributed.sync, "close_step", None)
        self._steps.heap.start()
        self._off = attach(self, trainer, device)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        now = _perf()
        self._close_step(now)
        self._steps.begin_epoch(now, trainer.current_epoch)
        if self._timeline is not None:
            self._timeline.epoch(trainer.current_epoch)

    def _log(self, trainer: Any) -> None:
        """Every ``log_every_n_steps`` steps, as the last one's batch ends: a loss point, and
        the recent steps' figures to the trainer's loggers."""
        index = self._steps.count - 1  # the records are built only for the loggers
        if (loss := self._last_loss()) is not None:
            self._losses.append((index, loss))
        known = index + 1 if (settled := self.settled) is None else min(index + 1, settled)
        if not trainer.loggers or not known:
            return
        n, workers = self.log_every_n_steps, self._workload.get("loader_workers", 0)
        recent = steady(self.records, range(known)[-n:], workers)
        metrics = {f"speedlab/{k}": getattr(recent, k) for k in ("data_time", "batch_time")}
        metrics = self.distributed.log_metrics(trainer, metrics, n)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)

    def _last_loss(self) -> Any:
        """The loss of the last step that returned outputs (None if it had none)."""
        outputs = self._trained[0]
        return outputs.get("loss") if isinstance(outputs, dict) else outputs

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._close_step(_perf())
        fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
        if self._active and self._last is not None:
            batches, samples = self._last  # a sized loader's fetcher fetches no batch ahead
            if getattr(fetcher, "fetched", 0) == batches:
                self._steps.last_batch(samples)  # the epoch's last step trained it

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._val_start = _perf()
        if self._timeline is not None:
            self._timeline.validation_start()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if self._active:
            if self._timeline is not None:
                self._timeline.validation_end()
            self.phases[Phase.validation] += self._steps.validated(self._val_start, _perf())

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.exception = exception
        self._finish()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._finish()

    # -- results ----------------------------------------------------------------------------

    def _build_result(self) -> RunResult:
        r = self.records
        phases = {**self.phases, **self._steps.phase_walls()}
        phases[Phase.compile] += sum(r.get("compile_time", ()))  # an XLA device's compilations
        notes = []
        if r["data_time"] and Phase.steady not in r["phase"]:
            notes.append(
                f"Only {len(r['data_time'])} steps ran, all warm-up or start-up: "
                f"no steady state to report. Run more than {self.warmup + 1} steps."
            )
        final = float(loss) if (loss := self._last_loss()) is not None else None
        sampler = self.sampler  # its CPU figures over the steady steps, as every step figure
        return RunResult(
            records=r,
            phases=phases,
            system=sampler.summary(self._steps.steady_start()) if sampler else SystemSummary(),
            final_loss=final,
            losses=[(step, float(loss)) for step, loss in self._losses],
            notes=notes,
            wall_time=_perf() - self._t0,
            device=getattr(self, "device", "cpu"),
            workload=dict(self._workload),
            **self._watches.results(),
        )

    @property
    def ran(self) -> bool:
        """Whether a fit started under this probe (here, or in rank processes it launched)."""
        return self._active or self._result is not None or self.distributed.ready()

    def result(self) -> RunResult:
        """The RunResult of the last fit this probe watched (partial if it was interrupted).

        After a fork/spawn launch (``ddp_notebook``) the ranks' records are read here.
        """
        if not self._active:
            self._result = self.distributed.collect() or self._result
        if self._result is None:
            if self._active:
                return self._build_result()
            raise RuntimeError(
                "SpeedProbe has not watched a fit yet: pass it to Trainer(callbacks=[...])."
            )
        return self._result


_bases = callback_bases()


class SpeedProbe(_SpeedProbeCore, UnlistedInSteps, *_bases):  # type: ignore[misc]
    """Lightning Callback recording data_time and batch_time of every training step.

    Works with ``lightning.pytorch`` and ``pytorch_lightning`` Trainers alike, beside any user
    profiler or callbacks, and logs ``speedlab/data_time`` and ``speedlab/batch_time`` (the last N
    steps' figures, by the rule of a run's: speedlab.results.steady) to the Trainer's loggers.

    Args:
        warmup: steps at the start of the fit left out of the steady-state figures.
        log_every_n_steps: how often to log to the Trainer's loggers and keep a loss point.
        sample_system: run the SystemSampler (CPU, RSS of workers, GPU) during the fit.
        compiled: whether the model is compiled (its first step is then the compile phase);
            ``None`` detects a model passed through ``torch.compile``.
        own_max_steps: the cell's own ``max_steps`` where the caller replaced it to stop the
            run early, so the result's ``workload["planned_steps"]`` is the cell's length.

    Example::

        probe = SpeedProbe(warmup=5)
        trainer = L.Trainer(max_steps=100, callbacks=[probe])
        trainer.fit(model, datamodule)
        print(probe.result().report())
    """

    # Lightning reads it on every hook it dispatches: a plain attribute, not the base's property.
    state_key = "SpeedProbe"  # type: ignore[assignment]

    # Lightning skips a callback's hook that is not callable. The probe does not listen to these
    # per-step hooks, and dispatching each would cost a profiler context every step; while its
    # fit's epoch loop runs it is not even listed (speedlab.measure.unlisted).
    on_train_batch_start = on_train_batch_end = None  # type: ignore[assignment]
    on_before_backward = on_after_backward = None  # type: ignore[assignment]
    on_before_optimizer_step = on_before_zero_grad = None  # type: ignore[assignment]
    on_validation_batch_start = on_validation_batch_end = None  # type: ignore[assignment]
