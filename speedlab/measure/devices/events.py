"""A step's edges on an asynchronous device's own timeline, from events in its queue.

The host queues a step's work and runs ahead, so its clock says when work was queued, not done.
An event recorded in the device's queue is stamped when the device reaches it. The probe stamps
the device's queue where it stamps the host's clock (``speedlab.measure.steps.StepLog``): at
each fetch's start, at its end (as the batch's copy is about to be queued: nothing is queued in
between), at the training batch's start and end, and, off the per-step path, at an epoch's
start, a step's close and around validation. Each is one event recorded and appended: which
step an edge belongs to is worked out when the events are read, not on the training path.

Read on the training path a few times a second (``Timeline.due``: a reading costs as much for
one step as for many), as far as the device has got (``query``), and after one synchronisation
at the end of the fit (``wait``), the events become the device's seconds, and the same calls,
in the same order, build a second ``StepLog`` on the device's clock. Its figures replace the
host's, by the host's own rules:

- data_time: the step's origin (the last fetch start before its batch; its epoch's start for an
  epoch's first) to its training batch's start: the time the device had nothing of this step to
  run, the host-to-device copy included; copy_time: the last fetch's end to that start, the
  copy's part of it.
- batch_time: the training batch's start to its end; wall: origin to close, less validation.
- A step fed the loader's iterator fetches inside its training: the device's idle time between
  each fetch's start and end (its queue ran dry while the host fetched) moves from batch_time to
  data_time.
- launch_lag: how long after the host queued a step's end the device reached it, for the
  first ``LAG_STEPS`` steps: near zero where the device ran each operation as soon as the host
  queued it (it waited on the host's launches), a step's work or more where the host ran ahead.

Never a synchronisation per step: one at the end of the fit, and one more to set the device's
clock against the host's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from speedlab.measure.steps import StepLog

LAG_STEPS = 512
"""The first steps whose launch lag is kept: their end events stay out of the pool until the
fit's end, when the device's clock is set against the host's."""

READ_EVERY_S = 0.25
"""A timeline is read this often on the host's clock: as often as the live view draws
(``speedlab.run.watch.REFRESH_PER_SECOND``)."""
READ_EVERY_STEPS = 64
"""...or after this many steps, if sooner: the events waiting to be read, and XLA's window of
execution times, stay bounded. A reading costs 100 to 150 us on a CPU however few steps it
covers: timed inside a zero-cost fit on 2026-11-30, readings took 18 us a step every 8 steps,
7 us every 64."""

FETCH_START, FETCH_END, START, END, EPOCH, CLOSE, VALIDATION = range(7)
"""What an event in the journal marks (``EventTimeline``)."""


class Timeline:
    """What the probe asks of a device's timeline: a stamp at each of a step's edges as the host
    passes it, and the device's figures written into the step records once known.

    The four per-step stamps (``fetch_start``, ``fetch_end``, ``start``, ``end``) run on the
    training path: a timeline may set them as attributes in ``watch``. The rest run once an
    epoch, a validation or a fit. Each does nothing unless a device's timeline needs it.
    """

    _next_read: tuple[float, int] = (0.0, 0)  # the host's clock, or the steps, read after

    def due(self, now: float, steps: int) -> bool:
        """Whether to read the timeline (``resolve``) after a step that ended ``now``, with
        ``steps`` so far: every ``READ_EVERY_S`` seconds or ``READ_EVERY_STEPS`` steps."""
        at, after = self._next_read
        if now < at and steps < after:
            return False
        self._next_read = (now + READ_EVERY_S, steps + READ_EVERY_STEPS)
        return True

    def watch(self, log: StepLog) -> None:
        """The fit's host step log, which the stamps follow call for call; called as the probe
        attaches to the fit, its model on the device, before any stamp."""

    def fetch_start(self) -> None:
        """A fetch of the loader starts."""

    def fetch_end(self) -> None:
        """That fetch ended."""

    def start(self) -> None:
        """The training batch starts (forward, backward, optimizer)."""

    def end(self) -> None:
        """The training batch ended."""

    def epoch(self, epoch: int) -> None:
        """Epoch ``epoch`` starts: its first step waits for its batch from now."""

    def close(self) -> None:
        """The open step ends now (an epoch's end, the fit's)."""

    def validation_start(self) -> None:
        """Validation starts inside the open step."""

    def validation_end(self) -> None:
        """That validation ended."""

    def resolve(self, records: dict[str, list], *, wait: bool = False) -> None:
        """Write the device's figures of the steps it has passed into ``records``; with
        ``wait``, of every step."""

    def settled(self) -> int | None:
        """How many of the first steps' records hold the device's figures, where the host's
        stand until the timeline reads them; None where the records are shown as they are."""
        return None


def stamped(timeline: Timeline, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` (the automatic loop's ``run(optimizer, batch_idx, kwargs)``, in whose shape
    ``speedlab.measure.path`` wraps either loop's) between the timeline's stamps of its start and
    end: a steady step's one frame for both."""
    start, end = timeline.start, timeline.end

    def stamped_call(optimizer: Any, batch_idx: Any, kwargs: Any) -> Any:
        start()
        outputs = call(optimizer, batch_idx, kwargs)
        end()
        return outputs

    return stamped_call


class EventTimeline(Timeline):
    """Stamps as events in the device's queue, read into per-step records.

    ``event`` makes an event of the device (``record()``, ``query()``, ``elapsed_time(end)`` in
    milliseconds, as ``torch.cuda.Event``); ``synchronize`` waits for the device's queue.
    ``stream``, where given, returns the queue each event is recorded in, asked once in
    ``watch``: ``torch.cuda.Event.record()`` without one builds a ``Stream`` of the current one
    at every call, most of a stamp's cost. Events are taken from a pool of those already read.
    """

    def __init__(
        self,
        event: Callable[[], Any],
        synchronize: Callable[[], None],
        lags: int = LAG_STEPS,
        stream: Callable[[], Any] | None = None,
    ) -> None:
        self._event = event
        self._synchronize = synchronize
        self._stream = stream
        self._in: tuple[Any, ...] = ()  # the stream to record in
        self._pool: list[Any] = []
        self._journal: list[tuple] = []  # (what, event[, epoch or validation's start event])
        self._host: StepLog | None = None
        self._device = StepLog(0.0)  # the same steps on the device's clock, from watch's event
        self._anchor: tuple[Any, float] = (None, 0.0)  # the last event read, and its seconds
        self._copies: list[float] = []  # each device step's copy_time
        self._fetched: float | None = None  # the last fetch's end before the next step
        self._started = 0.0  # the last training batch's start
        self._validating: Any = None  # the open validation's start event
        self._written = 0  # steps whose device figures are in the records
        self._lags = lags
        self._ends: list[tuple[int, Any]] = []  # (step, its end event), for the first steps
        self._kept: set[int] = set()  # ids of those end events, kept out of the pool

    def watch(self, log: StepLog) -> None:
        self._host = log
        self._in = (self._stream(),) if self._stream is not None else ()
        self._anchor = (self._recorded(), 0.0)
        pool, make, stream, append = self._pool, self._event, self._in, self._journal.append

        def stamper(what: int) -> Callable[[], None]:
            def stamp() -> None:  # _recorded's lines inlined: a frame less on the training path
                event = pool.pop() if pool else make()
                event.record(*stream)
                append((what, event))

            return stamp

        self.fetch_start, self.fetch_end = stamper(FETCH_START), stamper(FETCH_END)
        self.start, self.end = stamper(START), stamper(END)

    def _recorded(self) -> Any:
        event = self._pool.pop() if self._pool else self._event()
        event.record(*self._in)
        return event

    def epoch(self, epoch: int) -> None:
        self._journal.append((EPOCH, self._recorded(), epoch))

    def close(self) -> None:
        self._journal.append((CLOSE, self._recorded()))

    def validation_start(self) -> None:
        self._validating = self._recorded()

    def validation_end(self) -> None:
        if self._validating is not None:
            self._journal.append((VALIDATION, self._recorded(), self._validating))
            self._validating = None

    def resolve(self, records: dict[str, list], *, wait: bool = False) -> None:
        """Write the device's figures of closed steps into ``records``; with ``wait``,
        synchronize once first and read every step left.

        A step that raised in its training batch has no record on the host, nor one past the
        end of the records: the device's figures of such a step are dropped, so the step's own
        error is what the user sees.
        """
        drained = wait and bool(self._journal)
        if drained:
            self._synchronize()
        passed = len(self._journal) if wait else self._passed()
        if passed:
            self._replay(self._journal[:passed])
            del self._journal[:passed]
        self._write(records)
        if wait and self._ends:
            self._write_lags(records, drained)

    def settled(self) -> int:
        return self._written

    def _passed(self) -> int:
        """How many of the journal's first events the device has reached: events in one queue
        are reached in order, so the newest is asked first, and where it is not reached yet,
        the boundary is searched."""
        journal = self._journal
        if not journal or journal[-1][1].query():
            return len(journal)
        low, high = 0, len(journal) - 1  # before low: reached; from high: not
        while low < high:
            middle = (low + high) // 2
            if journal[middle][1].query():
                low = middle + 1
            else:
                high = middle
        return low

    def _replay(self, entries: list[tuple]) -> None:
        """The host's calls of ``entries``, on the device's clock, into the device's log; the
        events read go back to the pool, all but the last (the next reading's anchor) and the
        first steps' ends.

        Each event's seconds are counted from the last event read, not from the fit's first:
        CUDA's elapsed times are single-precision milliseconds, which an hour from their origin
        are a quarter of a millisecond apart.
        """
        anchor, at = self._anchor
        seconds = [at + anchor.elapsed_time(entry[1]) / 1e3 for entry in entries]
        log, host = self._device, self._host
        log.fetches_inside = inside = host is not None and host.fetches_inside
        read = [anchor]
        for entry, now in zip(entries, seconds):
            what = entry[0]
            if what == FETCH_START:
                log.begins.append(now)
            elif what == FETCH_END:
                if inside:
                    log.fetch_ends.append(now)
                else:
                    self._fetched = now
            elif what == START:
                self._started = now
            elif what == END:
                self._step(now, entry[1])
            elif what == EPOCH:
                log.begin_epoch(now, entry[2])
            elif what == CLOSE:
                log.close(now)
            else:
                log.validated(at + anchor.elapsed_time(entry[2]) / 1e3, now)
                read.append(entry[2])
            read.append(entry[1])
        self._anchor = (entries[-1][1], seconds[-1])
        kept = self._kept
        self._pool += [e for e in read if e is not self._anchor[0] and id(e) not in kept]

    def _step(self, end: float, event: Any) -> None:
        """A training batch ended at ``end``: the device's step, its batch already moved as it
        starts (its copy was queued before); the first steps keep their end events."""
        log, start, fetched = self._device, self._started, self._fetched
        index = len(log.steps)
        log.steps.append((len(log.begins), start, start, end, 0))
        self._copies.append(start - fetched if fetched is not None else 0.0)
        self._fetched = None
        if index < self._lags:
            self._ends.append((index, event))
            self._kept.add(id(event))

    def _write(self, records: dict[str, list]) -> None:
        """The device's figures of the steps it has closed, over the host's."""
        device = self._device.flush()
        first, n = self._written, min(self._device.closed, len(records["batch_time"]))
        if n <= first:
            return
        for key in ("data_time", "batch_time", "wall"):
            records[key][first:n] = device[key][first:n]
        records["copy_time"][first:n] = self._copies[first:n]
        self._written = n

    def _write_lags(self, records: dict[str, list], drained: bool) -> None:
        """Each kept step's ``launch_lag``: when the device finished it, on the host's clock,
        less when the host queued its end (the host's stamp of that end). The clocks meet at an
        event recorded on an empty queue (drained here unless it just was), which the device
        stamps at once."""
        if not drained:
            self._synchronize()
        anchor = self._event()
        anchor.record(*self._in)
        now = time.perf_counter()
        self._synchronize()
        steps = self._host.steps if self._host is not None else []
        n = min(len(records["batch_time"]), len(steps))
        lags: list[float | None] = [None] * len(records["batch_time"])
        for index, end in self._ends:
            if index < n:
                lags[index] = max(0.0, now - end.elapsed_time(anchor) / 1e3 - steps[index][3])
        records["launch_lag"] = lags
        self._ends.clear()
        self._kept.clear()
