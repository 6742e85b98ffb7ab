"""A fit's training steps as SpeedProbe's training path leaves them, and the step records built
from them off that path.

Inside Lightning's step what the probe touches has left the caches (``benchmarks/probe_cold.py``:
each object or code path it reaches costs about a microsecond), so the path keeps only stamps:
one at each fetch start (``begins``), one as each batch reached the device (``moved``), and a
step's training batch either as a tuple (``steps``) or, on the CPU where torch's batching fixes
the batches (``full``), as its start and end alone (``stamps``: the fetches and the move before
each are found by time here, the loader's last batch sized at its epoch's end, ``last_batch``).
The rest of a record is worked out here when the records are read (the live view's thread, the
probe's logging, a device's timeline, the fit's end): the step's origin, its data_time, its
wall once the next fetch or the epoch's end closes it (less validation run in between), its
phase and epoch, and its ``gc_time``: the full garbage collections that began in it
(``speedlab.measure.heap``, whose callback stamps them in ``heap.spans`` in whichever thread
collects).

A step's origin is the last fetch start before its training batch, or its epoch's start for an
epoch's first step (its wait includes the workers' start-up). Its data_time runs from there to
the moment its batch reached the device (the batch's start where nothing moved it since).

A step fed the loader's iterator (``training_step(self, dataloader_iter)``) fetches inside its
training and moves the batch itself: with ``fetches_inside``, each fetch's end is stamped too
(``fetch_ends``), the step's origin is its training's start (its epoch's start for the first),
its data_time the wait before that plus its fetches, and its batch_time the rest of its
training (the user's own copy to the device included), its samples those its fetches brought
(``fetch_samples``, sized as each next fetch or the step ends: the fetcher keeps one batch);
the next step's start ends it.
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

from speedlab.measure.heap import FullCollections
from speedlab.results.run import STEP_PHASES, Phase, empty_records

Step = tuple[int, float, float, float, int]
"""A step as the training path leaves it: (fetch starts so far, when the latest batch reached
the device, training batch start, its end, samples)."""


class StepLog:
    """The steps of one fit: appended on the training path, built into records on reading."""

    def __init__(self, t0: float, warmup: int = 0, compiled: bool = False) -> None:
        self.t0 = t0
        self.begins: list[float] = []  # each fetch start while the probe is on
        self.moved = [0.0]  # each time a batch reached the device (the latest last)
        self.steps: list[Step] = []
        self.stamps: list[float] = []  # start, end, start, ... of steps not yet in ``steps``
        self.full = 0  # the samples of each stamped step
        self.fetches_inside = False  # steps fetch their batches in their training
        self.fetch_ends: list[float] = []  # each fetch's end, where they do
        self.fetch_samples: list[int] = []  # the samples each of those fetches brought
        self._handed = 0  # batches the fetcher had handed over this epoch, at the last sizing
        self.records: dict[str, list] = {**empty_records(), "gc_time": []}
        self._warmup = warmup
        self._compiled = compiled
        self._steady_from = max(warmup, int(compiled))
        self._epochs: dict[int, tuple[float, int]] = {}  # first step -> (start, epoch number)
        self._closes: dict[int, float] = {}  # step -> end other than a fetch start's
        self._validation: dict[int, list[tuple[float, float]]] = {}  # step -> its validations
        self.heap = FullCollections()  # the fit's full garbage collections, once started
        self._charged = 0  # collections charged to a closed step, or passed over
        self._epoch = 0  # of the last step built
        self._built = 0  # steps in the records
        self._origins: list[float] = []  # of the steps built
        self._open = 0  # the first built step whose close is not known yet
        self._lock = threading.Lock()

    # -- off the training path: the Callback's hooks, once an epoch or a validation --------

    def begin_epoch(self, now: float, epoch: int) -> None:
        """An epoch starts: its first step waits for its batch from now."""
        self.close(now)
        self._epochs[len(self.steps)] = (now, epoch)
        self._handed = 0  # the fetcher counts again from its epoch's start

    def last_batch(self, samples: int) -> None:
        """The last step trained its loader's last batch, of ``samples``: a stamped step
        counted ``full`` ones (safe to repeat)."""
        with self._lock:
            self._absorb()
            index = len(self.steps) - 1
            if index >= 0:
                self.steps[index] = (*self.steps[index][:4], samples)
                if index < self._built:
                    self.records["samples"][index] = samples

    def fetch_ended(self, now: float, fetcher: Any, size: Callable[[Any], int]) -> None:
        """Where steps fetch inside: a fetch ended ``now``, and the one before it is sized."""
        self.size_fetches(fetcher, size)
        self.fetch_ends.append(now)

    def size_fetches(self, fetcher: Any, size: Callable[[Any], int]) -> None:
        """Where steps fetch inside: the samples of the fetch ended since the last call (one at
        most: the next fetch's end and its step's end call). The fetcher keeps only the batch
        of its last fetch, and counts the fetches that brought one (an exhausted loader's did
        not)."""
        while len(self.fetch_samples) < len(self.fetch_ends):
            brought = fetcher.fetched > self._handed
            self._handed = fetcher.fetched
            self.fetch_samples.append(size(fetcher._batch) if brought else 0)

    @property
    def count(self) -> int:
        """Steps so far, whether recorded as tuples or stamps (a step half stamped is not)."""
        with self._lock:  # not while another thread moves stamps into steps
            return len(self.steps) + len(self.stamps) // 2

    def held(self) -> bool:
        """Whether the next step is its epoch's first, which waits from the epoch's start."""
        with self._lock:
            self._absorb()
        return len(self.steps) in self._epochs

    def open_step(self) -> int | None:
        """The last step, until a fetch start (the next step's, where steps fetch inside) or
        ``close`` ends it."""
        with self._lock:
            self._absorb()
        index = len(self.steps) - 1
        if index < 0 or index in self._closes:
            return None
        if not self.fetches_inside and self.steps[index][0] < len(self.begins):
            return None
        return index

    def close(self, now: float) -> None:
        """The open step, if any, ends now."""
        index = self.open_step()
        if index is not None:
            self._closes[index] = now

    def validated(self, start: float, end: float) -> float:
        """Validation ran from ``start`` to ``end`` inside the open step, which its wall (and its
        ``gc_time``) leaves out; its seconds."""
        index = self.open_step()
        if index is not None:
            self._validation.setdefault(index, []).append((start, end))
        return end - start

    # -- reading ------------------------------------------------------------------------

    def flush(self) -> dict[str, list]:
        """The records of every step so far (the last one's wall runs to its batch's end
        until the step is closed); any thread may call it."""
        with self._lock:
            self._absorb()
            n = len(self.steps)
            if self._built < n:
                self._build(n)
            self._close_walls(n)
            return self.records

    @property
    def closed(self) -> int:
        """How many steps have their wall, as of the last ``flush``: the next fetch start (the
        next step's start, where steps fetch inside) or a ``close`` ended them."""
        return self._open

    def steady_start(self) -> float | None:
        """When the first steady step began (``time.perf_counter``); None before one."""
        records = self.flush()
        first = next((i for i, p in enumerate(records["phase"]) if p == Phase.steady), None)
        return None if first is None else self.t0 + records["t"][first]

    def phase_walls(self) -> dict[str, float]:
        """Seconds of wall in each phase a step can be in."""
        walls, records = dict.fromkeys(STEP_PHASES, 0.0), self.flush()
        for phase, wall in zip(records["phase"], records["wall"]):
            walls[phase] += wall
        return walls

    def _absorb(self) -> None:
        """The stamped steps' tuples: a step's fetch starts are those begun before its end, its
        batch the latest moved by then. The training path appends as this reads: only whole
        pairs are taken."""
        stamps = self.stamps
        n = len(stamps) // 2 * 2
        if not n:
            return
        taken = stamps[:n]
        del stamps[:n]
        begins, moved, full = self.begins, self.moved, self.full
        self.steps += [
            (bisect_right(begins, end), moved[bisect_right(moved, end) - 1], start, end, full)
            for start, end in zip(taken[::2], taken[1::2])
        ]

    def _build(self, n: int) -> None:
        """Records of steps ``_built`` to ``n``, a column at a time: with the walls, 4.8
        thousand instructions a step under callgrind, against 10.9 thousand a step at a time."""
        r, built, begins, t0 = self.records, self._built, self.begins, self.t0
        begun, moved, start, end, samples = zip(*self.steps[built:n])
        if self.fetches_inside:  # the step moves its batch itself: no stamp says when
            origins, moved = list(start), start
            ends, before = self.fetch_ends, self.steps[built - 1][0] if built else 0
            spans = list(zip((before, *begun), begun))
            fetching = [sum(e - b for b, e in zip(begins[lo:hi], ends[lo:hi])) for lo, hi in spans]
            samples = [sum(self.fetch_samples[lo:hi]) for lo, hi in spans]
        else:
            origins = [begins[b - 1] if b else t0 for b in begun]
            fetching = [0.0] * (n - built)
        firsts = [i for i in range(built, n) if i in self._epochs]
        for i in firsts:
            origins[i - built] = self._epochs[i][0]
        data = [(m if m > o else s) - o + f for m, s, o, f in zip(moved, start, origins, fetching)]
        r["t"] += [o - t0 for o in origins]
        r["data_time"] += data
        if "host_data_time" in r:  # the host's figures until the device's replace them
            r["host_data_time"] += data
            r["copy_time"] += [0.0] * len(data)
        r["batch_time"] += [e - s - f for s, e, f in zip(start, end, fetching)]
        r["wall"] += [e - o for e, o in zip(end, origins)]
        r["samples"] += samples
        r["gc_time"] += [0.0] * (n - built)  # charged as each step closes
        phases = [Phase.steady] * (n - built)
        for i in {*range(built, min(self._steady_from, n)), *firsts}:  # the rest are steady
            phases[i - built] = self._phase(i, i in firsts)
        r["phase"] += phases
        marks = [*firsts, n]
        r["epoch"] += [self._epoch] * (marks[0] - built)
        for first, following in itertools.pairwise(marks):
            self._epoch = self._epochs[first][1]
            r["epoch"] += [self._epoch] * (following - first)
        self._origins += origins
        self._built = n

    def _close_walls(self, n: int) -> None:
        """Each built step's wall once the next fetch start (the next step's start, where
        steps fetch inside) or a ``close`` has ended it."""
        opened = self._open
        if self.fetches_inside:
            ends = [step[2] for step in self.steps[opened + 1 : n + 1]]
        else:
            begins = self.begins
            fetched = len(begins)
            ends = [begins[step[0]] for step in self.steps[opened:n] if step[0] < fetched]
        ends += [None] * (n - opened - len(ends))
        for index, close in list(self._closes.items()):  # an epoch's end or the fit's: rare
            at = index - opened
            if 0 <= at < len(ends) and (ends[at] is None or close < ends[at]):
                ends[at] = close
        closed = ends.index(None) if None in ends else len(ends)
        walls, origins = self.records["wall"], self._origins
        walls[opened : opened + closed] = [
            end - origins[i] for i, end in enumerate(ends[:closed], opened)
        ]
        for index, spans in list(self._validation.items()):
            if opened <= index < opened + closed:
                walls[index] -= sum(end - start for start, end in spans)
        if self._charged < len(self.heap.spans):
            self._charge_collections(opened, ends[:closed])
        self._open = opened + closed

    def _charge_collections(self, opened: int, ends: list[float]) -> None:
        """``gc_time`` of the steps closed from ``opened``, at ``ends``: the full collections
        that began between a step's origin and its end, outside its validation. One that began
        between steps (an epoch's end, the fit's start) is no step's."""
        spans, gc_time, origins = self.heap.spans, self.records["gc_time"], self._origins
        for index, end in enumerate(ends, opened):
            validation = self._validation.get(index, ())
            while self._charged < len(spans) and spans[self._charged][0] < end:
                start, stop = spans[self._charged]
                validating = any(a <= start < b for a, b in validation)
                if start >= origins[index] and not validating:
                    gc_time[index] += stop - start
                self._charged += 1

    def _phase(self, index: int, first: bool) -> str:
        """The phase of a step before the steady range, or an epoch's first."""
        if self._compiled and index == 0:
            return Phase.compile
        if first:
            return Phase.epoch_start
        return Phase.warmup if index < self._warmup else Phase.steady
