"""Watching a run while it trains: the live state of its steps, sampled on a throttle.

The probe only appends numbers to its records. While a run trains, a ticker thread reads them
at most ``REFRESH_PER_SECOND`` times a second, builds a ``Snapshot`` (recent steps, progress,
ETA, phase, MFU, CPU and RSS from the system sampler) and hands it to the view's ``draw``.
Nothing it reads waits for the training: no lock, no device synchronisation.

``LiveView`` is the view the runner talks to; on its own it shows nothing. The views that show
something (a terminal line, a notebook chart, the panel) extend it in speedlab.notebook.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from speedlab.measure.fork_pause import ForkPause
from speedlab.results.device import DeviceSplit
from speedlab.results.steady import steady

REFRESH_PER_SECOND = 4
WINDOW = 120  # steps in the rolling chart
_RECENT = 20  # steps behind the samples/s, data_time and batch_time figures
_STEP_KEYS = ("t", "data_time", "batch_time", "wall", "samples", "phase")


@dataclass(frozen=True)
class Snapshot:
    """What a live view shows at one moment of a run.

    ``data_window``/``batch_window`` hold the last settled steps (at most ``WINDOW``: on an
    asynchronous device, those whose figures are the device's; elsewhere every step), the first
    of them being step ``first_step`` (1-based); ``slots`` is the chart's width in steps;
    ``time_limit`` is the run's ``--time`` in seconds, if any. samples/s, data_time and
    batch_time cover the last ``_RECENT`` settled steps, by the rule of a run's figures
    (speedlab.results.steady). ``mfu`` is those samples/s times the counted step's FLOPs a
    sample, over the device's peak (as ``RunResult.mfu``, which takes the steady steps'
    samples/s); None until the step is counted, or where the count or the peak is unknown.
    ``device_split`` splits those steps' time on an asynchronous device into busy, idle for
    want of input and idle waiting for launches, once its traced warm-up step says how long it
    worked (``RunResult.device_split``); None before, and where it traces nothing.
    System figures come from the newest SystemSample (None until there is one).
    """

    steps: int
    total_steps: int | None
    elapsed: float
    eta: float | None
    phase: str
    samples_per_s: float
    data_time: float
    batch_time: float
    first_step: int
    data_window: tuple[float, ...]
    batch_window: tuple[float, ...]
    slots: int = WINDOW
    time_limit: float | None = None
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    workers: int | None = None
    mfu: float | None = None
    device_split: DeviceSplit | None = None


def snapshot(
    records: Mapping[str, Sequence[Any]],
    *,
    settled: int | None = None,
    total_steps: int | None = None,
    elapsed: float = 0.0,
    time_limit: float | None = None,
    phase: str | None = None,
    system: Any = None,
    flops_per_sample: float | None = None,
    peak: float | None = None,
    device_busy: float | None = None,
) -> Snapshot:
    """Summarise the records so far; safe while the training thread is still appending.

    ``settled``: how many of the first steps' figures are final, where the rest are the host's
    until a device's timeline is read (``SpeedProbe.settled``); the figures and the chart are
    those steps', the progress every step's.
    ``phase`` overrides the phase of the last step (e.g. "validation" while it runs);
    ``system`` is a SystemSample or None; ``flops_per_sample`` (the counted step's) and
    ``peak`` (the device's FLOP/s) give the MFU where both are known; ``device_busy`` (the
    seconds the device worked in its traced step) the split of its time.
    """
    n = min(len(records[k]) for k in _STEP_KEYS)
    shown = n if settled is None else min(n, settled)
    lo = max(0, shown - _RECENT)
    wall = sum(records["wall"][lo:shown])
    per_step = wall / (shown - lo) if shown > lo and wall > 0 else None
    eta = (total_steps - n) * per_step if total_steps and per_step is not None else None
    if time_limit is not None:
        left = max(0.0, time_limit - elapsed)
        eta = left if eta is None else min(eta, left)
    start = max(0, shown - WINDOW)
    recent = steady(records, range(lo, shown), getattr(system, "workers", None) or 0)
    rate, mfu = recent.samples_per_s, None
    if flops_per_sample and peak and rate > 0:  # NaN before a step: not > 0
        mfu = flops_per_sample * rate / peak
    return Snapshot(
        steps=n,
        total_steps=total_steps,
        elapsed=elapsed,
        eta=eta,
        phase=phase or (records["phase"][n - 1] if n else "setup"),
        samples_per_s=rate,
        data_time=recent.data_time,
        batch_time=recent.batch_time,
        first_step=start + 1,
        data_window=tuple(records["data_time"][start:shown]),
        batch_window=tuple(records["batch_time"][start:shown]),
        time_limit=time_limit,
        cpu_percent=getattr(system, "cpu_percent", None),
        rss_bytes=getattr(system, "rss_bytes", None),
        workers=getattr(system, "workers", None),
        mfu=mfu,
        device_split=DeviceSplit.of(recent.data_time, recent.batch_time, device_busy),
    )


def planned_steps(trainer: Any) -> int | None:
    """Training batches this fit will run, from the Trainer's limits; None while unknown.

    Reads plain attributes only (never ``estimated_stepping_batches``, which may load data), so
    it is safe from the ticker thread. ``max_steps`` counts optimizer steps: batches are that
    times ``accumulate_grad_batches``.
    """
    limits = []
    accumulate = max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
    max_steps = getattr(trainer, "max_steps", -1)
    if max_steps is not None and max_steps >= 0:
        limits.append(max_steps * accumulate)
    max_epochs = getattr(trainer, "max_epochs", None)
    per_epoch = getattr(trainer, "num_training_batches", math.inf)
    if max_epochs is not None and max_epochs >= 0 and math.isfinite(per_epoch):
        limits.append(max_epochs * per_epoch)
    return int(min(limits)) if limits else None


class _Ticker:
    """Calls ``draw`` every 1/REFRESH_PER_SECOND seconds on a daemon thread until stopped."""

    def __init__(self, draw: Callable[[], None]) -> None:
        self._draw = draw
        self._stop = threading.Event()
        self._fork_pause = ForkPause()
        self._thread = threading.Thread(target=self._loop, name="speedlab-live", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1 / REFRESH_PER_SECOND):
            with self._fork_pause:
                self._draw()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class LiveView:
    """A view that shows nothing; the base of the real views.

    The runner calls ``start_sweep``; per run ``predicted`` (after the baseline),
    ``start_run``, ``watch`` (training starts) and ``unwatch`` (it ended), then ``end_run``
    with each result; at last ``end_sweep``. Views with ``live = True`` get ``draw`` calls
    from a ticker thread while a run trains.
    """

    live = False

    def start_sweep(self, spec: Any) -> None:
        self.spec = spec
        self.runs_total = len(spec.plan) * spec.repeat
        self.run_index = 0

    def start_run(self, knobs: Any, attempt: int) -> None:
        self.run_index += 1
        shown = " ".join(f"{k}={v}" for k, v in knobs.as_dict().items()) or "as written"
        repeat = f" #{attempt + 1}" if self.spec.repeat > 1 else ""
        self.label = f"run {self.run_index}/{self.runs_total} {shown}{repeat}"
        self.knobs = knobs

    def predicted(self, label: str, prediction: Any, guess: Any) -> None:
        """Show, before a run after the baseline starts, speedlab's prediction of its speedup
        and the learner's guess (None where none was asked or given)."""

    def watch(self, session: Any) -> None:
        self.session = session
        self.frame = 0
        self._started = time.perf_counter()
        self._last_key: tuple | None = None
        self._ticker = _Ticker(self._tick) if self.live else None

    def unwatch(self) -> None:
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
            self._tick(force=True)

    def state(self) -> Snapshot:
        """A Snapshot of the run being watched; its MFU from the FLOPs the probe counted and
        the peak it took before the fit trained."""
        session = self.session
        fit = session.fits[-1] if session.fits else None
        probe = session.active_probe
        records = probe.records if probe is not None else {k: () for k in _STEP_KEYS}
        sampler = getattr(probe, "sampler", None)
        steps = min(len(records[k]) for k in _STEP_KEYS)
        return snapshot(
            records,
            settled=getattr(probe, "settled", None),
            total_steps=planned_steps(fit.trainer) if fit is not None else None,
            elapsed=time.perf_counter() - self._started,
            time_limit=self.spec.controls.time,
            phase=self._phase(fit, steps),
            system=sampler.latest() if sampler is not None else None,
            flops_per_sample=getattr(probe, "flops_per_sample", None),
            peak=getattr(probe, "peak", {}).get("peak"),
            device_busy=getattr(probe, "device_busy", None),
        )

    def _phase(self, fit: Any, steps: int) -> str | None:
        """The phase the records cannot tell yet: before the first step, or in validation."""
        if fit is None:
            return "setup"
        trainer = fit.trainer
        if getattr(trainer, "sanity_checking", False) or getattr(trainer, "validating", False):
            return "validation"
        if steps:
            return None
        if self.knobs.preload in ("ram", "shm") and not fit.preload_s:
            return "preload"
        if self.knobs.compile not in (None, "off") and getattr(trainer, "training", False):
            return "compile"
        return "setup"

    def _tick(self, force: bool = False) -> None:
        state = self.state()
        sample_key = (state.steps, state.phase, state.cpu_percent, int(state.elapsed))
        if force or sample_key != self._last_key:
            self._last_key = sample_key
            self.frame += 1
            self.draw(state)

    def draw(self, state: Snapshot) -> None:
        """Show the current state of the run."""

    def end_run(self, result: Any) -> None:
        """Show a finished run."""

    def end_sweep(self, sweep: Any) -> None:
        """Show the comparison of all runs."""
