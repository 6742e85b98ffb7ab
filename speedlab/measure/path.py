"""SpeedProbe's training path: the wrappers it puts on the calls Lightning's fit loop makes
every step (a batch's fetch, its move to the device, the optimization loop's run), which stamp
a step's edges into its ``StepLog`` and do nothing else (``speedlab.measure.probe``)."""

from __future__ import annotations

import itertools
import math
import operator
import sys
import time
from collections.abc import Callable
from typing import Any

from speedlab.measure.compat import batch_untouched, feeds_iterator, quiet_fetch
from speedlab.measure.devices import Device
from speedlab.measure.devices.events import stamped
from speedlab.measure.taps import Taps
from speedlab.measure.unlisted import Unlisted
from speedlab.measure.watches import WarmupWatches
from speedlab.measure.workload import batch_size_of, full_batch, last_batch, samples_of

_perf = time.perf_counter


def attach(probe: Any, trainer: Any, device: Device) -> Callable[[], None]:
    """Wrap the calls that bound each step on the trainer's loop and strategy, and the epoch
    and validation loops' runs, which take speedlab's callbacks out of the trainer's list for
    the steps (``speedlab.measure.unlisted``). After the fit they pass calls on: another
    probe's wrappers may sit on top, and put them back.

    What a wrapper touches inside Lightning's step is no longer in the caches, about a
    microsecond an object or code path (``benchmarks/probe_cold.py``): on the CPU, where
    torch's batching fixes the batches, a step appends its start and end and keeps its
    outputs (``stamping``), and its records are worked out off the path (``StepLog``)."""
    loop, ranks, taps = trainer.fit_loop.epoch_loop, probe.distributed, probe._taps
    watch_errors = ranks.in_child  # a rank process keeps the error that ended its step
    timeline, log = probe._timeline, probe._steps
    fetcher = getattr(trainer.fit_loop, "_data_fetcher", None)
    log.fetches_inside = inside = feeds_iterator(fetcher)
    if timeline is not None:
        timeline.watch(log)
    begin, move, record, steps = (
        log.begins.append,
        log.moved.append,
        log.steps.append,
        log.steps,
    )
    loaders, every, trained = probe._loaders, probe.log_every_n_steps, probe._trained
    sampler = probe.sampler  # a due reading is taken as a step ends (``read_if_due``)
    due, reads = (sampler.path_due(), sampler.read_if_due) if sampler else ([math.inf], None)
    size = batch_size_of if loaders is None else lambda batch: samples_of(batch, loaders)
    # A step fed the loader's iterator counts its fetches' samples (StepLog.size_fetches)
    sized = (lambda _: log.size_fetches(fetcher, size)) if inside else None
    batch_of = sized or operator.itemgetter("batch")
    # where torch's own batching fixes a batch's samples, the last batch alone is sized
    full = full_batch(trainer, fetcher)  # None for several loaders or the fed iterator
    after = probe._after_step if timeline is not None or probe._sync_step else None
    host_clock = timeline is None and not inside and not watch_errors  # stamps only
    probe._last = last_batch(trainer) if host_clock and full and after is None else None
    log.full = full or 0
    moved_as_fetched = (  # the batch is on the device as its fetch ends
        host_clock
        and device.host_memory
        and batch_untouched(trainer)
        and quiet_fetch(trainer, "_on_after_fetch")
    )
    on = True  # until the fit ends: a wrapper left under another one passes calls on

    def fetch_start(original: Any) -> Any:
        quiet = quiet_fetch(trainer, "_on_before_fetch")
        stamp = timeline.fetch_start if timeline is not None else None

        def fetch_starts() -> None:
            if not quiet:
                original()
            if on:
                begin(_perf())
                if stamp is not None:
                    stamp()

        return fetch_starts

    def fetch_end(original: Any) -> Any:
        stamp = timeline.fetch_end if timeline is not None and inside else None

        def fetch_ends() -> None:
            if watch_errors and (error := sys.exc_info()[1]) is not None:
                ranks.saw(error)
            if on:
                if inside:
                    log.fetch_ended(_perf(), fetcher, size)
                if stamp is not None:
                    stamp()
            original()

        return fetch_ends

    def fetched(_: Any) -> Any:
        def moves() -> None:  # in the loop's call that does nothing
            if on:
                move(_perf())

        return moves

    def to_device(original: Any) -> Any:
        # The device's mark of a fetch's end: nothing is queued between it and the copy.
        stamp = timeline.fetch_end if timeline is not None and not inside else None

        def on_device(batch: Any, device: Any = None, dataloader_idx: int = 0) -> Any:
            if stamp is not None and on:
                stamp()
            batch = original(batch, device, dataloader_idx)
            if on:
                move(_perf())
            return batch

        return on_device

    def stamping(original: Any) -> Any:
        """The automatic loop's ``run`` (``runs``) where a step is its start and end
        (``StepLog.stamps``)."""
        stamp, left = log.stamps.append, every

        def trains(optimizer: Any, batch_idx: Any, kwargs: Any) -> Any:
            nonlocal left
            if not on:
                return original(optimizer, batch_idx, kwargs)
            stamp(_perf())
            outputs = original(optimizer, batch_idx, kwargs)
            stamp(end := _perf())
            if outputs:  # Lightning's dict of the step's outputs; empty where it skipped
                trained[0] = outputs
            left -= 1
            if not left:
                left = every
                probe._log(trainer)
            if end >= due[0]:
                reads()
            return outputs

        return trains

    def recording(original: Any) -> Any:
        """The automatic loop's ``run`` (``runs``), recorded as a step tuple: its batch sized,
        the device's stamps, a rank's error and sync time (``after``)."""
        steady = original if timeline is None else stamped(timeline, original)
        if watch_errors:
            steady = caught(steady)
        begins, moved = log.begins, log.moved

        def trains(optimizer: Any, batch_idx: Any, kwargs: Any) -> Any:
            if not on:
                return original(optimizer, batch_idx, kwargs)
            start = _perf()
            outputs = steady(optimizer, batch_idx, kwargs)
            end = _perf()
            samples = full if full and not fetcher.done else size(batch_of(kwargs))
            record((len(begins), moved[-1], start, end, samples))
            if outputs:
                trained[0] = outputs
            if after is not None:
                after(end)
            if not len(steps) % every:
                probe._log(trainer)
            if end >= due[0]:
                reads()
            return outputs

        return trains

    def caught(call: Any) -> Any:
        def catches(optimizer: Any, batch_idx: Any, kwargs: Any) -> Any:
            try:
                return call(optimizer, batch_idx, kwargs)
            except BaseException as error:
                ranks.saw(error)
                raise

        return catches

    def runs(original: Any) -> Any:
        """The automatic loop's ``run(optimizer, batch_idx, kwargs)``, wrapped in its own
        shape: a wrapper that forwards ``*args`` costs a step about 2 us more
        (``benchmarks/probe_cold.py``): Python calls such a wrapper, and it its target, with
        the arguments' tuple and an evaluation loop of their own."""
        steady = (stamping if probe._last is not None else recording)(original)
        warm = probe.warmup if probe._watches.each else 0  # steps below it run the watches
        return warming(taps, probe._watches, steady, warm) if warm else steady

    def runs_manual(original: Any) -> Any:
        """The manual loop's ``run(kwargs)``, wrapped by ``runs`` in the automatic one's shape
        (its warm-up's wrapper, under the shape's, stays in place)."""
        wrapped = runs(lambda _optimizer, _batch_idx, kwargs: original(kwargs))
        return lambda kwargs: wrapped(None, None, kwargs)

    # The fetcher takes the loop's methods as each epoch starts: attached mid-epoch, it
    # holds them already and gets the wrappers now.
    mid_epoch = getattr(fetcher, "_start_profiler", None) == loop._on_before_fetch
    taps.put(loop, "_on_before_fetch", fetch_start)
    if moved_as_fetched:
        taps.put(loop, "_on_after_fetch", fetched)
    else:
        taps.put(trainer.strategy, "batch_to_device", to_device)
    if inside or watch_errors:  # the fetches' ends inside a step, a rank's errors
        taps.put(loop, "_on_after_fetch", fetch_end)
    taps.put(loop.automatic_optimization, "run", runs)
    taps.put(loop.manual_optimization, "run", runs_manual)
    unlisted = Unlisted(trainer)  # speedlab's callbacks out of the steps' hook lookups
    taps.put(loop, "run", unlisted.training)
    taps.put(loop.val_loop, "run", unlisted.validating)
    if mid_epoch:
        taps.put(fetcher, "_start_profiler", lambda _: loop._on_before_fetch)
        taps.put(fetcher, "_stop_profiler", lambda _: loop._on_after_fetch)

    def off() -> None:
        nonlocal on
        on = False

    return off


def warming(taps: Taps, watches: WarmupWatches, steady: Any, warm: int) -> Any:
    """``steady`` with the warm-up's watches around the first ``warm`` calls; then it
    takes its own place, where no other wrapper has been put over it."""
    calls = itertools.count()

    def watched(*args: Any) -> Any:
        index = next(calls)
        if index >= warm:
            return steady(*args)
        watches.enter(index)
        try:
            return steady(*args)
        finally:
            watches.exit()
            if index + 1 == warm:
                taps.unwrap(steady)

    watched.__wrapped__ = steady  # type: ignore[attr-defined]
    return watched
