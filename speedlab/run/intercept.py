"""Apply one run's knobs to ordinary Lightning code, and put everything back afterwards.

``Intercept`` is the one context manager that touches global state. While it is active, every
``Trainer`` the cell builds (``lightning.pytorch`` or ``pytorch_lightning``) gets a SpeedProbe
and the knobs' Trainer arguments, and every ``fit`` gets a compiled model, a rebuilt training
DataLoader and preloaded data. On exit: Trainer classes unpatched, matmul precision, SIGINT
handler, environment and torch settings restored, worker processes ended, /dev/shm copies gone.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from speedlab.measure.compat import is_datamodule, trainer_classes
from speedlab.measure.dataset import fingerprint
from speedlab.measure.devices import Device, available_devices
from speedlab.measure.flops import compiled_modules
from speedlab.measure.pipeline import probe_sink
from speedlab.measure.probe import SpeedProbe
from speedlab.results.knobs import (
    DATA_KNOBS,
    KNOBS,
    TRAINER_PREFIX,
    KnobRefused,
    Knobs,
    check_number,
)
from speedlab.run.compiling import compile_step, forget_compiled, own_compile_note
from speedlab.run.fit_record import FitRecord
from speedlab.run.forking import check_fork, forked_rank_threads_note
from speedlab.run.global_state import GlobalState, restore_sigint
from speedlab.run.loaders import (
    can_stamp,
    map_loaders,
    rebuild_loader,
    rebuild_refusal,
    shutdown_loader,
)
from speedlab.run.precision import resolve_precision, trainer_device
from speedlab.run.preload import Preloaded, preload
from speedlab.run.stopping import PlannedStop, time_is_up


@dataclass(frozen=True)
class RunControls:
    """How long each run trains and what counts as warm-up (not knobs: they are not compared).

    Checked when built: a bad value raises ``KnobError`` naming the option (``--steps 0``).
    """

    steps: int | None = None
    time: float | None = None
    warmup: int = 5

    def __post_init__(self) -> None:
        checked = {
            "steps": None
            if self.steps is None
            else check_number("steps", self.steps, int, 1, "an integer >= 1"),
            "time": None
            if self.time is None
            else check_number("time", self.time, float, 1e-9, "seconds > 0"),
            "warmup": check_number("warmup", self.warmup, int, 0, "an integer >= 0"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


def _matmul(level: str, devices: list[Device] | None = None) -> tuple[str, bool]:
    """What ``--matmul level`` does on the device a run here trains on by default, and whether
    it changes float32 matmuls on any device a run here may train on (``devices``, all those
    available by default): a Trainer may choose another."""
    effects = [device.matmul(level) for device in devices or available_devices()]
    return effects[0][0], any(changes for _, changes in effects)


_PRECISION_ALIASES = {"64": "64-true", "32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed"}
"""Lightning's older precision names and what it runs for each: not a change of precision."""


class RunInProgress(RuntimeError):
    """Another run of this process holds the Trainer's patches: runs cannot overlap (their
    patches and process-wide settings would tangle, and each would measure the other's fits)."""


_RUNNING = threading.Lock()
"""Held by the one Intercept active in the process (a panel's run in its thread, a cell's)."""


class Intercept:
    """Patch Trainer construction and fit for one run; restore everything on exit. One at a
    time in a process: another one's ``__enter__`` raises ``RunInProgress``.

    Args:
        knobs: the run's knobs.
        controls: how long it trains and its warm-up.
        fingerprint_data: after each fit, read the fingerprint of its training data
            (``speedlab.measure.dataset``: a few of its items) into its workload, as an
            assignment that grades needs; a profiled fit reads nothing after training.

    Example::

        with Intercept(Knobs(workers=2), RunControls(steps=30)) as run:
            train_fn()
        results = [fit.probe.result() for fit in run.fits]
    """

    def __init__(
        self, knobs: Knobs, controls: RunControls | None = None, *, fingerprint_data: bool = False
    ) -> None:
        self.knobs = knobs
        self.controls = controls or RunControls()
        self.fingerprint_data = fingerprint_data
        self.fits: list[FitRecord] = []
        self.notes: list[str] = []
        self.matmul_changes: bool | None = None  # whether --matmul changed float32 matmuls
        self.stop_requested = False
        self.active_probe: SpeedProbe | None = None
        self._pending: dict[int, tuple[SpeedProbe, list[str]]] = {}
        self._patched: list[tuple[type, str, Any]] = []
        self._loaders: list[Any] = []
        self._state: GlobalState | None = None
        self._holds_lock = False
        self._thread: int | None = None  # the run's: a fit in another is not the run's

    # -- context ----------------------------------------------------------------------------

    def __enter__(self) -> Intercept:
        import torch

        if not _RUNNING.acquire(blocking=False):
            raise RunInProgress(
                "Another speedlab run is training in this kernel (a panel's or another cell's): "
                "wait for it to end, or press its Stop, then run this again."
            )
        self._holds_lock = True
        self._thread = threading.get_ident()
        self._state = GlobalState()
        try:
            if self.knobs.matmul is not None:
                torch.set_float32_matmul_precision(self.knobs.matmul)
                note, self.matmul_changes = _matmul(self.knobs.matmul)
                self.notes.append(note)
            for cls in trainer_classes():
                self._patch(cls, "__init__", self._wrap_init(cls.__init__))
                self._patch(cls, "fit", self._wrap_fit(cls.fit))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # Each step runs whatever an earlier one raised (an interrupt, a failing shutdown):
        # the last registered runs first, the global state is put back last.
        with contextlib.ExitStack() as undo:
            if self._holds_lock:  # last of all: the next run may start
                undo.callback(self._release)
            if self._state is not None:
                undo.callback(self._state.restore)
            if self.knobs.compile not in (None, "off"):
                undo.callback(forget_compiled)  # this run's must not serve the next one
            undo.callback(self._shutdown_loaders)
            undo.callback(self._unpatch)

    def _release(self) -> None:
        self._holds_lock = False
        _RUNNING.release()

    def _unpatch(self) -> None:
        for cls, name, original in reversed(self._patched):
            setattr(cls, name, original)
        self._patched.clear()

    def _shutdown_loaders(self) -> None:
        for loader in self._loaders:
            shutdown_loader(loader)
        self._loaders.clear()

    def stop(self) -> None:
        """End the run after the current step: every Trainer fitting now stops and skips the
        validation it has left (stopping would otherwise validate first), until its fit ends.
        A fit started since stops when this is called again (the panel's ticker repeats it)."""
        self.stop_requested = True
        for fit in self.fits:
            if fit.ended:  # the user's Trainer validates as it was set up afterwards
                continue
            fit.trainer.should_stop = True  # each fit sets it back to False as it starts
            if fit.trainer.limit_val_batches != 0:  # the ticker repeats stop() for later ones
                fit.set_attribute(fit.trainer, "limit_val_batches", 0)

    def _unbuilt_note(self) -> str | None:
        """What this run sets as a Trainer is built, which a Trainer built before the run (in
        an earlier cell) never got; None where it sets nothing there."""
        k, c = self.knobs, self.controls
        unset = {
            **{name: getattr(k, name) for name in ("precision", "devices", "strategy")},
            **{f"{TRAINER_PREFIX}{name}": value for name, value in k.trainer.items()},
            "steps": c.steps,
            "time": c.time,
        }
        named = [f"{name}={value}" for name, value in unset.items() if value is not None]
        if not named:
            return None
        return (
            f"{', '.join(named)} did not act: the Trainer was built before the run (in an "
            "earlier cell), and speedlab sets these as a Trainer is built. Build the Trainer "
            "in the profiled cell."
        )

    def _ours(self) -> bool:
        """Whether the calling thread is the run's. A panel trains in a background thread
        while the kernel runs other cells: a Trainer those build and fit trains as it would
        alone (the matmul precision excepted: torch has one for the whole process)."""
        return threading.get_ident() == self._thread

    def asked(self) -> bool:
        """Whether ``stop()`` was called."""
        return self.stop_requested

    def planned_stop(self, trainer: Any) -> bool:
        """Whether this run's own controls ended the epoch of ``trainer`` (one built during the
        run): ``--steps``, ``--time`` (both replace the cell's ``max_steps`` and ``max_time``)
        or ``stop()``."""
        c = self.controls
        return (
            self.stop_requested
            or (c.steps is not None and trainer.global_step >= c.steps)
            or (c.time is not None and time_is_up(trainer))
        )

    def _patch(self, cls: type, name: str, replacement: Any) -> None:
        self._patched.append((cls, name, cls.__dict__[name]))
        setattr(cls, name, replacement)

    # -- Trainer(...) -----------------------------------------------------------------------

    def trainer_kwargs(
        self, kwargs: dict[str, Any]
    ) -> tuple[dict[str, Any], SpeedProbe, list[str]]:
        """The user's Trainer arguments with the knobs applied and a SpeedProbe attached, and
        the notes on how the knobs resolved; ``KnobRefused`` for a knob the Trainer's device
        cannot take (``Device.refusal``)."""
        kwargs = dict(kwargs)
        k, c = self.knobs, self.controls
        notes: list[str] = []
        accelerator = k.trainer.get("accelerator", kwargs.get("accelerator"))
        device = trainer_device(accelerator)  # the one this Trainer will train on
        for knob in KNOBS:  # before the Trainer is built: Lightning would refuse some itself
            why = device.refusal(knob, getattr(k, knob))
            if why is not None:
                raise KnobRefused(why)
        if k.precision is not None:  # amp: for that device
            kwargs["precision"], note = resolve_precision(k.precision, accelerator)
            if note is not None:
                notes.append(note)
        if k.devices is not None:
            kwargs["devices"] = k.devices
        if k.strategy is not None:
            kwargs["strategy"] = k.strategy
        kwargs.update(k.trainer)
        own_max_steps = kwargs.get("max_steps", -1)
        if c.steps is not None:
            kwargs["max_steps"] = c.steps
        if c.time is not None:
            kwargs["max_time"] = datetime.timedelta(seconds=c.time)
        probe = SpeedProbe(
            warmup=c.warmup,
            compiled=k.compile not in (None, "off") or None,
            own_max_steps=own_max_steps,
        )
        callbacks = kwargs.get("callbacks") or []
        callbacks = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
        # First, so that it acts before a progress bar the cell passes closes its bar.
        kwargs["callbacks"] = [PlannedStop(self.asked, self.planned_stop), *callbacks, probe]
        return kwargs, probe, notes

    def _wrap_init(self, original: Any) -> Any:
        session = self

        @functools.wraps(original)
        def __init__(trainer: Any, *args: Any, **kwargs: Any) -> None:
            if not session._ours():
                return original(trainer, *args, **kwargs)
            kwargs, probe, notes = session.trainer_kwargs(kwargs)
            original(trainer, *args, **kwargs)
            requested = kwargs.get("precision")
            actual = str(getattr(trainer, "precision", requested))
            asked = str(requested)
            if requested is not None and actual != _PRECISION_ALIASES.get(asked, asked):
                notes.append(
                    f"precision={requested} is not supported on this hardware; Lightning ran "
                    f"{actual} instead."
                )
            session._pending[id(trainer)] = (probe, notes)

        return __init__

    # -- trainer.fit(...) -------------------------------------------------------------------

    def _wrap_fit(self, original: Any) -> Any:
        session = self
        signature = inspect.signature(original)

        @functools.wraps(original)
        def fit(trainer: Any, *args: Any, **kwargs: Any) -> Any:
            if not session._ours():
                return original(trainer, *args, **kwargs)
            bound = signature.bind(trainer, *args, **kwargs)  # a wrong argument: as Lightning
            sigint = signal.getsignal(signal.SIGINT)  # Lightning's own handling replaces it
            probe, notes = session._pending.get(id(trainer), (None, []))
            prebuilt = probe is None  # built before the run started: measure it all the same
            probe = probe or SpeedProbe(warmup=session.controls.warmup)
            record = FitRecord(trainer, probe, notes=list(notes), prebuilt=prebuilt)
            if prebuilt:  # its max_steps and max_time are the cell's own: only stop() is ours
                record.attach(PlannedStop(session.asked), probe)
                record.note(session._unbuilt_note())
            session.fits.append(record)
            session.active_probe = probe
            preloaded: list[Preloaded] = []
            try:
                check_fork(trainer)  # ddp_notebook after CUDA: refuse, and say why
                record.note(forked_rank_threads_note(trainer))
                session._prepare(bound.arguments, record, preloaded)
                return original(*bound.args, **bound.kwargs)
            except SystemExit:
                # Lightning answers Ctrl-C by ignoring SIGINT and calling sys.exit(1).
                if isinstance(probe.exception, KeyboardInterrupt):
                    raise KeyboardInterrupt from None
                raise
            except BaseException as err:
                record.exception = err
                raise
            finally:
                record.stopped = session.stop_requested  # a Stop after the fit ended is not its
                # Each step runs whatever an earlier one raised; the last registered first.
                with contextlib.ExitStack() as after:
                    after.callback(restore_sigint, sigint)
                    after.callback(record.undo)
                    if record.compiled is not None:  # the user's model runs uncompiled again
                        trained = bool(getattr(probe, "records", {}).get("wall"))  # here
                        after.callback(lambda: record.note(*record.compiled.finish(trained)))
                    after.callback(session._shutdown_trainer_loaders, trainer)
                    for item in preloaded:  # a preloaded copy is read before it goes
                        after.callback(item.cleanup)
                    dataset = record.train_dataset() if session.fingerprint_data else None
                    if dataset is not None:  # after the fit: its reads cannot change the run
                        record.data = fingerprint(dataset)

        return fit

    def _prepare(self, args: dict[str, Any], record: FitRecord, preloaded: list[Preloaded]) -> None:
        """Compile the model and rebuild the training data source, as the knobs ask."""
        k = self.knobs
        model = args["model"]
        record.model = getattr(model, "_orig_mod", model)
        if k.compile is not None and (own := compiled_modules(record.model)):
            record.note(own_compile_note(k.compile, own))
        if k.compile not in (None, "off"):  # forward and the submodules, not training_step
            record.compiled = compile_step(record.model, k.compile)
        # Without data knobs a loader with workers is rebuilt only to stamp its batches.
        stamp_only = all(getattr(k, name) in (None, "off") for name in DATA_KNOBS)
        source = args.get("train_dataloaders")
        if is_datamodule(source):
            args["datamodule"], args["train_dataloaders"] = source, None
            source = None
        if source is not None:
            args["train_dataloaders"] = self._rebuild(source, record, preloaded, stamp_only)
            return
        owner = args.get("datamodule") or record.model
        original = getattr(owner, "train_dataloader", None)
        if original is None:
            if not stamp_only:
                record.note("No training DataLoader found to apply the data knobs to.")
            return

        def train_dataloader() -> Any:  # each time Lightning asks (reloading every n epochs)
            return self._rebuild(original(), record, preloaded, stamp_only)

        record.set_attribute(owner, "train_dataloader", train_dataloader)

    def _rebuild(
        self, source: Any, record: FitRecord, preloaded: list[Preloaded], stamp_only: bool = False
    ) -> Any:
        """The training data with the data knobs applied to each DataLoader in it.

        Without data knobs, only a lone DataLoader with workers is rebuilt, to stamp its batches.
        """
        from torch.utils.data import DataLoader

        single = isinstance(source, DataLoader)
        if stamp_only and (not single or not can_stamp(source) or source.num_workers == 0):
            return source  # nothing to stamp, or not a loader speedlab rebuilds as it is
        loaders: list[Any] = []
        map_loaders(source, loaders.append)
        options = {
            "stamps": probe_sink(record.probe) if single else None,  # one loader, one log
            "several": len(loaders) > 1,
        }
        return map_loaders(
            source, lambda loader: self._rebuild_one(loader, record, preloaded, options)
        )

    def _rebuild_one(
        self, loader: Any, record: FitRecord, preloaded: list[Preloaded], options: dict
    ) -> Any:
        reason = rebuild_refusal(loader)
        if reason is not None:
            asked = ", ".join(
                f"{k}={v}" for k, v in self.knobs.as_dict().items() if k in DATA_KNOBS
            )
            record.note(f"{asked} not applied: {reason}; it ran as the cell made it.")
            return loader
        dataset = loader.dataset
        if self.knobs.preload not in (None, "off"):
            start = time.perf_counter()
            item = preload(self.knobs.preload, dataset)
            record.preload_s += time.perf_counter() - start
            preloaded.append(item)
            record.note(*item.notes)
            dataset = item.dataset
        devices = self.knobs.devices or 1
        rebuilt = rebuild_loader(loader, self.knobs, dataset=dataset, devices=devices, **options)
        record.note(*rebuilt.notes)
        record.notebook_class = record.notebook_class or rebuilt.notebook_class
        self._loaders.append(rebuilt.loader)
        return rebuilt.loader

    def _shutdown_trainer_loaders(self, trainer: Any) -> None:
        """End the workers of every loader this fit used, the user's own included."""
        loaders = list(self._loaders)
        fit_loop = trainer.fit_loop
        for loop in (fit_loop, fit_loop.epoch_loop.val_loop):
            combined = getattr(loop, "_combined_loader", None)
            if combined is not None:
                loaders += list(combined.flattened)
        for loader in loaders:
            shutdown_loader(loader)
