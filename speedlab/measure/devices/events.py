"""A step's edges on an asynchronous device's own timeline, from events in its queue.

The host queues a step's work and runs ahead, so its clock says when work was queued, not done.
An event recorded in the device's queue is stamped when the device reaches it. The probe marks
each step's edges as the host passes them; the device's stamps then give what the device did:

- ``origin`` (the step begins waiting for its batch), ``fetched`` (the loader delivered it),
  ``start`` and ``end`` (the training batch: forward, backward, optimizer), ``close`` (the step
  ends), and ``val_start``/``val_end`` around validation run inside the step.
- data_time: ``origin`` to ``start``: the time the device had nothing of this step to run, the
  host-to-device copy included. copy_time: ``fetched`` to ``start``, the copy's part of it.
- batch_time: ``start`` to ``end``; wall: ``origin`` to ``close``, less validation.
- A step fed the loader's iterator fetches inside its training: ``wait`` marks each fetch's start
  and end there, its origin is marked at its start, and the device's idle time between each
  pair (the queue ran dry while the host fetched) moves from batch_time to data_time.
- launch_lag: how long after the host queued a step's ``end`` the device reached it, for the
  first ``LAG_STEPS`` steps: near zero where the device ran each operation as soon as the host
  queued it (it waited on the host's launches), a step's work or more where the host ran ahead.

The stamps are read once the device has passed them (``query``), a few steps later, or after
one synchronisation at the end of the fit (``wait``), and one more to set the device's clock
against the host's: never a synchronisation per step.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

LAG_STEPS = 512
"""The first steps whose launch lag is kept: their end events stay out of the pool until the
fit's end, when the device's clock is set against the host's."""


class Timeline(Protocol):
    """What the probe asks of a device's timeline: a mark at each of a step's edges as the host
    passes it, and the device's figures written into the step records once known."""

    def mark(self, index: int, point: str) -> None: ...

    def resolve(self, records: dict[str, list], *, wait: bool = False) -> None: ...


class StepMarks:
    """The probe's marks in a device's queue: which step each edge belongs to, from the step
    log's state as the host passes the edge (``speedlab.measure.steps.StepLog``)."""

    def __init__(self, timeline: Timeline, log: Any) -> None:
        self.timeline, self._log = timeline, log

    def fetch_start(self) -> None:
        """A fetch starts, before the log stamps it: a wait inside the training of a step fed
        the loader's iterator; otherwise the open step's close and the next one's origin."""
        if self._log.fetches_inside:
            self.timeline.mark(len(self._log.steps), "wait")
        else:
            self.origin()

    def fetch_end(self) -> None:
        """A fetch ends: the end of that wait, or the moment the loader delivered the batch."""
        point = "wait" if self._log.fetches_inside else "fetched"
        self.timeline.mark(len(self._log.steps), point)

    def origin(self) -> None:
        """The open step's close and the next one's origin (an epoch's first step has its
        epoch's start for origin)."""
        self.open("close")
        if not self._log.held():
            self.timeline.mark(len(self._log.steps), "origin")

    def open(self, point: str) -> None:
        """``point`` of the open step, if any."""
        index = self._log.open_step()
        if index is not None:
            self.timeline.mark(index, point)


class EventTimeline:
    """Marks of step edges in the device's queue, resolved into per-step records.

    ``event`` makes an event of the device (``record()``, ``query()``, ``elapsed_time(end)`` in
    milliseconds, as ``torch.cuda.Event``); ``synchronize`` waits for the device's queue.
    ``stream``, where given, returns the queue each mark is recorded in, asked once at the first
    mark (a timeline is made before the device may be touched): ``torch.cuda.Event.record()``
    without one builds a ``Stream`` of the current one at every call, most of a mark's cost.
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
        self._in: tuple[Any, ...] = ()  # the stream to record in, once asked
        self._pool: list[Any] = []
        self._steps: dict[int, dict[str, Any]] = {}
        self._waits: dict[int, list[Any]] = {}  # step -> its fetches' start and end events
        self._lags = lags
        self._ends: list[tuple[int, Any, float]] = []  # (step, its end event, host clock)
        self._kept: set[int] = set()  # ids of those end events, kept out of the pool

    def mark(self, index: int, point: str) -> None:
        """The host reached ``point`` of step ``index``: the device stamps it when it gets there."""
        if self._stream is not None:
            self._in, self._stream = (self._stream(),), None
        event = self._pool.pop() if self._pool else self._event()
        event.record(*self._in)
        if point == "wait":
            self._waits.setdefault(index, []).append(event)
        else:
            self._steps.setdefault(index, {})[point] = event
        if point == "end" and len(self._ends) < self._lags:
            self._ends.append((index, event, time.perf_counter()))
            self._kept.add(id(event))

    def resolve(self, records: dict[str, list], *, wait: bool = False) -> None:
        """Write the device's figures of closed steps into ``records``; with ``wait``,
        synchronize once first and resolve every step left.

        A step without its training batch raised before the probe recorded it, and a step past
        the end of the records never got there: both are dropped, so the step's own error is
        what the user sees.
        """
        drained = wait and bool(self._steps)
        if drained:
            self._synchronize()
        for index in sorted(self._steps):
            marks = self._steps[index]
            close = marks.get("close")
            if not wait and (close is None or not close.query()):
                break
            del self._steps[index]
            waits = self._waits.pop(index, [])
            if close is not None and index < len(records["batch_time"]) and "end" in marks:
                self._write(records, index, marks, waits)
            self._pool += [event for event in marks.values() if id(event) not in self._kept]
            self._pool += waits
        if wait and self._ends:
            self._write_lags(records, drained)

    def _write_lags(self, records: dict[str, list], drained: bool) -> None:
        """Each kept step's ``launch_lag``: when the device finished it, on the host's clock,
        less when the host queued its end. The clocks meet at an event recorded on an empty
        queue (drained here unless it just was), which the device stamps at once."""
        if not drained:
            self._synchronize()
        anchor = self._event()
        anchor.record(*self._in)
        now = time.perf_counter()
        self._synchronize()
        n = len(records["batch_time"])
        lags: list[float | None] = [None] * n
        for index, end, queued in self._ends:
            if index < n:
                lags[index] = max(0.0, now - end.elapsed_time(anchor) / 1e3 - queued)
        records["launch_lag"] = lags
        self._ends.clear()
        self._kept.clear()

    @staticmethod
    def _write(records: dict[str, list], index: int, marks: dict[str, Any], waits: list) -> None:
        def span(a: str, b: str) -> float:
            return marks[a].elapsed_time(marks[b]) / 1e3

        validation = span("val_start", "val_end") if "val_end" in marks else 0.0
        fetching = sum(a.elapsed_time(b) for a, b in zip(waits[::2], waits[1::2])) / 1e3
        records["data_time"][index] = span("origin", "start") + fetching
        records["copy_time"][index] = span("fetched", "start") if "fetched" in marks else 0.0
        records["batch_time"][index] = span("start", "end") - fetching
        records["wall"][index] = span("origin", "close") - validation
