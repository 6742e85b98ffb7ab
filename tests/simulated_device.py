"""A simulated asynchronous device: work queued by the host runs in order on a background thread,
and an event is stamped when the queue reaches it, as a CUDA stream does.

It lets the device-timeline logic run honestly on a CPU: the host's clock says when work was
queued, the events when it was done. It plugs into speedlab as a device does (a ``Device``
registered for the run's device type, here the CPU's). It never replaces the check on a real GPU.
"""

from __future__ import annotations

import contextlib
import gc
import queue
import statistics
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import lightning.pytorch as pl
import torch

import speedlab.measure.devices
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.devices import CpuDevice
from speedlab.measure.devices.busy import BusyWatch
from speedlab.measure.devices.events import EventTimeline, Timeline
from speedlab.measure.steps import StepLog

STEP_S = 0.02
"""The device's work a step, unless a test says otherwise."""


def device_work(batch_times: list[float]) -> bool:
    """Whether the spans are the device's ``STEP_S`` of work: never less (queueing it takes the
    host a fraction of a millisecond), and less than two steps of it (a busy machine wakes the
    device's thread late)."""
    return min(batch_times) > 0.9 * STEP_S and statistics.median(batch_times) < 1.9 * STEP_S


class SimulatedEvent:
    """``torch.cuda.Event``'s timing part: record, query, elapsed_time (milliseconds)."""

    def __init__(self, device: SimulatedDevice) -> None:
        self._device = device
        self.stamp: float | None = None
        self.queued = 0.0

    def record(self, stream: SimulatedDevice | None = None) -> None:
        """Queue the event on its device, or on ``stream``: another device's queue, as a CUDA
        event is recorded in a given stream."""
        self.stamp = None
        self.queued = time.perf_counter()
        (stream or self._device).queue.put(self)

    def query(self) -> bool:
        return self.stamp is not None

    def elapsed_time(self, end: SimulatedEvent) -> float:
        if self.stamp is None or end.stamp is None:
            raise RuntimeError("an event was not reached yet: synchronize first")
        return (end.stamp - self.stamp) * 1e3


class SimulatedDevice(CpuDevice):
    """Runs ``launch``ed work (seconds of sleep) in order; ``synchronize`` waits for all of it.

    As a ``Device``: the CPU (a run on it trains on the CPU), asynchronous, timed by its events.
    """

    asynchronous = True

    def __init__(self) -> None:
        self.queue: queue.Queue[float | SimulatedEvent | None] = queue.Queue()
        self.launched = 0  # pieces of work queued so far
        self.spans: list[tuple[float, float]] = []  # when each piece of work really ran (a
        # busy host wakes the device's thread late)
        self.waits: list[float] = []  # how long each event waited in the queue: at least the
        # work queued before it, plus however late the machine woke the device's thread
        threading.Thread(target=self._run, name="simulated-device", daemon=True).start()

    @property
    def worked(self) -> list[float]:
        """How long each piece of work took."""
        return [end - start for start, end in self.spans]

    def launch(self, seconds: float) -> None:
        self.launched += 1
        self.queue.put(seconds)

    def event(self) -> SimulatedEvent:
        return SimulatedEvent(self)

    def synchronize(self) -> None:
        self.queue.join()

    def close(self) -> None:
        """The device's thread ends once it has run what was queued before."""
        self.queue.put(None)

    def timeline(self, warmup: int = 0) -> EventTimeline:
        return EventTimeline(self.event, self.synchronize)

    def busy_watch(self, warmup: int) -> BusyWatch | None:
        return BusyWatch(warmup - 1, lambda: SimulatedTrace(self)) if warmup else None

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                self.queue.task_done()
                return
            if isinstance(item, SimulatedEvent):
                item.stamp = time.perf_counter()
                self.waits.append(item.stamp - item.queued)
            else:
                start = time.perf_counter()
                if item:  # an empty launch: no sleep, whose GIL round trip a GPU never pays
                    time.sleep(item)
                self.spans.append((start, time.perf_counter()))
            self.queue.task_done()


class SimulatedTrace:
    """The simulated device's own record of the work queued since the trace started, as CUPTI
    records a GPU's kernels."""

    source = "the simulated device's record of its work in one warm-up step"

    def __init__(self, device: SimulatedDevice) -> None:
        self._device, self._first = device, device.launched

    def stop(self) -> list[tuple[float, float]]:
        self._device.synchronize()
        return self._device.spans[self._first : self._device.launched]


class ProbeCalls:
    """SpeedProbe's calls to a timeline and to the host's step log, in its order, for tests
    that drive a timeline without a fit (a fit runs them in ``probe_on_simulated_device``)."""

    def __init__(self, timeline: Timeline, *, inside: bool = False) -> None:
        self.timeline, self.log = timeline, StepLog(time.perf_counter())
        self.log.fetches_inside = inside  # the steps fetch their batches in their training
        timeline.watch(self.log)

    def epoch(self, epoch: int = 0) -> None:
        self.close()
        self.log.begin_epoch(time.perf_counter(), epoch)
        self.timeline.epoch(epoch)

    def fetch_start(self) -> None:
        self.log.begins.append(time.perf_counter())
        self.timeline.fetch_start()

    def fetch_end(self) -> None:
        if self.log.fetches_inside:
            self.log.fetch_ends.append(time.perf_counter())
            self.log.fetch_samples.append(8)
        self.timeline.fetch_end()

    def start(self) -> None:
        self._start = time.perf_counter()
        self.timeline.start()

    def end(self) -> None:
        """The training batch ended; the probe records the step."""
        self.timeline.end()
        log = self.log
        log.steps.append((len(log.begins), log.moved[-1], self._start, time.perf_counter(), 8))

    def close(self) -> None:
        self.timeline.close()
        self.log.close(time.perf_counter())

    def validation(self, work: Callable[[], None]) -> None:
        started = time.perf_counter()
        self.timeline.validation_start()
        work()
        self.timeline.validation_end()
        self.log.validated(started, time.perf_counter())

    def records(self, steps: int) -> dict[str, list]:
        """What the probe records from the host's clock, before the device's figures replace
        them: ``steps`` of them."""
        return {key: [0.0] * steps for key in ("data_time", "copy_time", "batch_time", "wall")}


@contextlib.contextmanager
def probe_on_simulated_device() -> Iterator[SimulatedDevice]:
    """SpeedProbe times the (CPU) run's steps on a simulated device's timeline: the device is
    registered as the CPU's while the context lasts."""
    device = SimulatedDevice()
    # The device's thread shares the GIL with the host's: hand it over often, so the device
    # stamps an event when it gets there, not when the host lets go (every 5 ms by default).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(0.0001)
    # And it needs a core of its own, as a GPU is hardware of its own: beside torch's second
    # compute thread (which spins after each op) on 2 cores it reached a launch-bound step's
    # end up to 8 ms late, 40% of the step; on one torch thread, 0.5 ms at most.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # A real device runs its queue while the host collects garbage; this one's thread needs the
    # GIL, which a full collection of the process's heap holds throughout (390 ms for 3 million
    # objects here: the device's step then ran 405 ms). Late in the suite a device-bound run's
    # batch_time read 7% over the device's work, as one such stall of about 75 ms would make
    # it. Frozen, the heap built before the fit is left out of every collection.
    gc.freeze()
    try:
        with mock.patch.dict(speedlab.measure.devices.DEVICES, {"cpu": lambda: device}):
            yield device
    finally:
        device.close()
        gc.unfreeze()
        sys.setswitchinterval(switch)
        torch.set_num_threads(threads)


class OnDevice(KnownCostModel):
    """Queues ``work_s`` of work on the simulated device each step; step ``fail_at`` raises.

    With ``copy_s``, each batch's copy to the device is a copy from pageable memory: queued
    behind the device's earlier work, with the host waiting until it is done.
    """

    fail_at: int | None = None
    work_s = STEP_S
    copy_s = 0.0

    def transfer_batch_to_device(self, batch: Any, device: Any, dataloader_idx: int) -> Any:
        if self.copy_s:
            self.simulated.launch(self.copy_s)
            self.simulated.synchronize()
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def training_step(self, batch, batch_idx):
        if batch_idx == self.fail_at:
            raise RuntimeError(f"step {batch_idx} fails")
        self.simulated.launch(self.work_s)
        return super().training_step(batch, batch_idx)


def on_device(
    device: SimulatedDevice, fail_at: int | None = None, work_s: float = STEP_S, copy_s: float = 0.0
) -> OnDevice:
    # Set after __init__: Lightning copies a module's init arguments, and a device holds a lock.
    model = OnDevice(step_s=0.0)
    model.simulated, model.fail_at, model.work_s, model.copy_s = device, fail_at, work_s, copy_s
    return model


def fit_on_device(model: OnDevice, probe: Any, steps: int, *callbacks: pl.Callback, **data) -> None:
    """Train ``model`` for ``steps`` under ``probe`` on ``known_cost_loader(**data)``."""
    trainer = pl.Trainer(
        accelerator="cpu", max_steps=steps, callbacks=[probe, *callbacks], **QUIET_TRAINER
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, known_cost_loader(n=800, batch_size=8, **data))


class SynchronisedTruth(pl.Callback):
    """The truth a run's figures are checked against, on a real device or this one.

    samples/s: samples over the time from the device's queue drained after step ``first - 1``
    to the queue drained at the end of the fit (what a synchronize at both edges of the steady
    window measures). The split of a step, at each step of ``sampled``: the queue is drained
    when the step before ends, when the step's batch is ready and when it ends, so the device
    idled for want of input exactly from the first to the second (``split[i][0]``) and worked
    on the step from the second to the third (``split[i][1]``). Those steps run drained: the
    timeline's figures for them are checked, not the run's averages.
    """

    def __init__(
        self, synchronize: Callable[[], None], first: int, sampled: frozenset[int] = frozenset()
    ) -> None:
        self.synchronize, self.first, self.sampled = synchronize, first, sampled
        self.samples, self.start, self.end = 0, 0.0, 0.0
        self.split: dict[int, tuple[float, float]] = {}
        self._edges: list[float] = []

    def _drained(self) -> float:
        self.synchronize()
        return time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx in self.sampled:
            self._edges.append(self._drained())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx in self.sampled:
            origin, ready = self._edges[-2:]
            self.split[batch_idx] = (ready - origin, self._drained() - ready)
        if batch_idx == self.first - 1:
            self.start = self._drained()
        elif batch_idx >= self.first:
            self.samples += len(batch[0])
        if batch_idx + 1 in self.sampled:
            self._edges.append(self._drained())

    def on_train_end(self, trainer, pl_module) -> None:
        self.end = self._drained()

    @property
    def samples_per_s(self) -> float:
        return self.samples / (self.end - self.start)
