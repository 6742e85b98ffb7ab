"""The steady-state figures of a run: one rule for every figure the run shows.

samples/s, data_time, batch_time, step_time and the data share come from the same steps, so
they agree: step_time = data_time + batch_time, data share = data_time / step_time, and
samples/s = samples / (steps x step_time).

- **Averages over whole rounds.** The figures are the time actually spent, on average per
  step, over whole rounds of the DataLoader workers (one batch from each). Workers hand over
  batches in bursts (several ready at once, then a long wait): the median step may not wait
  at all while the run waits a third of its time. A round holds one batch of each worker, so
  an average over whole rounds counts each burst's wait once. The typical (median) step is
  kept beside them (``typical_step``, ``typical_data``) to say where the two differ.
- **batch_time is the rest of the step**: its wall time less data_time. It holds forward,
  backward and optimizer step (``records["batch_time"]``, the training batch's own span) and
  the loop's hooks and logging between steps (``loop_time``), which a progress bar or logging
  every step can make a noticeable part of a short step.
- **A pause is named, not averaged in.** A round that took longer than the typical round by
  more than ``PAUSE_FACTOR - 1`` of its steps (a step alone: ``PAUSE_FACTOR`` times the typical
  one), and by at least ``PAUSE_MIN_S``, is a pause (a garbage collection, a kernel's first
  use, the machine busy with other work): it is left out of the figures and
  listed with its step, so one pause never decides a verdict. So is a round that held
  ``PAUSE_MIN_S`` or more of full garbage collection (``records["gc_time"]``, where measured):
  the kernel's heap, not the run's steps, decides when one comes and how long it takes, and a
  225 ms collection among 37 ms steps is six steps, too few for the rule of lengths. Rounds
  like these must be rare to be pauses: past ``PAUSE_MAX_SHARE`` of the rounds they recur, are
  part of the run's cost and stay in. So do long rounds without a collection that add up to
  more than ``PAUSE_MAX_TIME_SHARE`` of the time (two or more): another process's time slices
  among short steps are rare as rounds and yet much of the time.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PAUSE_FACTOR = 10.0
"""How many times the typical step a step must take to be a pause; a round of several workers'
steps, how many typical steps longer than the typical round it must be, less one. A steady step
varies by tens of percent, two or three times on a machine shared with other work; ten times is
beyond that and still catches a 150 ms collection among steps of 15 ms. Measured in rounds
alone, it did not among three workers' rounds of 45 ms: a full collection of a kernel's heap
with Lightning, torch and IPython imported (371k objects, 213 to 257 ms here) made a round 5.7
times the typical one, and cut a run's samples/s by 30%."""
PAUSE_MIN_S = 0.02
"""Seconds a pause must add to the typical round at least: the OS's scheduling hiccups (a few
milliseconds) are ten times a short step, and they are the machine's steady cost."""
PAUSE_MAX_SHARE = 0.05
"""Largest share of the rounds that may be left out as pauses (at least one): longer rounds
that come more often than this are how the run goes, not pauses."""
PAUSE_MAX_TIME_SHARE = 0.1
"""Largest share of the counted steps' time that two or more long rounds without a full
collection may add over the typical round and still be left out. On 2 cores beside a process
spinning 1 s in 3, steps of 1 ms took a 24 ms time slice 46 times in 6,000 (0.8% of the
rounds), 14% of the run's time."""


@dataclass(frozen=True)
class Pause:
    """A steady step far longer than the run's others, or one that ran a full garbage
    collection (``collected`` seconds of it), left out of its figures."""

    step: int
    seconds: float
    typical: float
    collected: float = 0.0


@dataclass(frozen=True)
class Steady:
    """The figures of a run's steady steps under one rule (see the module's docstring).

    ``steps`` are the indices of the steps counted: whole rounds of the workers, pauses left
    out. ``recurring`` counts the long rounds kept in: too many, or too much of the time, to be
    pauses.
    """

    steps: tuple[int, ...] = ()
    pauses: tuple[Pause, ...] = ()
    recurring: int = 0
    samples: int = 0
    seconds: float = 0.0
    data_time: float = math.nan
    batch_time: float = math.nan
    loop_time: float = math.nan
    typical_step: float = math.nan
    typical_data: float = math.nan

    @property
    def step_time(self) -> float:
        return self.data_time + self.batch_time

    @property
    def data_share(self) -> float:
        step = self.step_time
        return self.data_time / step if step > 0 else math.nan

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else math.nan

    @property
    def typical_share(self) -> float:
        """The typical (median) step's wait over the typical step."""
        step = self.typical_step
        return self.typical_data / step if step > 0 else math.nan


def rounds(steps: Sequence[int], workers: int) -> list[list[int]]:
    """``steps`` cut into whole rounds of ``workers`` (one step each without workers); the
    last, partial round is left out unless it is all there is."""
    size = max(1, workers)
    whole = [list(steps[i : i + size]) for i in range(0, len(steps) - size + 1, size)]
    return whole or ([list(steps)] if steps else [])


def steady(records: Mapping[str, Sequence], steps: Sequence[int], workers: int) -> Steady:
    """The figures of ``steps`` (indices into the per-step ``records``) under the one rule."""
    wall, data = records["wall"], records["data_time"]
    collected = records.get("gc_time") or [0.0] * len(wall)
    cut = rounds(steps, workers)
    if not cut:
        return Steady()
    times = [sum(wall[i] for i in r) for r in cut]
    typical = statistics.median(times)
    longest_usual = (PAUSE_FACTOR - 1) * typical / len(cut[0])  # typical steps a round may add
    over = [t - typical for t in times]
    collecting = [sum(collected[i] for i in r) for r in cut]
    long = [
        k
        for k, (o, c) in enumerate(zip(over, collecting))
        if (o > longest_usual and o >= PAUSE_MIN_S) or c >= PAUSE_MIN_S
    ]
    paused = set(long) if len(long) <= max(1, int(PAUSE_MAX_SHARE * len(cut))) else set()
    unexplained = [k for k in paused if collecting[k] < PAUSE_MIN_S]
    usual_s = sum(t for k, t in enumerate(times) if k not in paused)
    if len(unexplained) > 1 and sum(over[k] for k in unexplained) > PAUSE_MAX_TIME_SHARE * usual_s:
        paused -= set(unexplained)
    kept = tuple(i for k, r in enumerate(cut) if k not in paused for i in r)
    typical_step = statistics.median(wall[i] for i in kept)
    pauses = tuple(
        Pause(step, wall[step], typical_step, collected[step])
        for k in sorted(paused)
        for step in [max(cut[k], key=lambda i: (collected[i], wall[i]))]
    )
    n = len(kept)
    seconds = sum(wall[i] for i in kept)
    waited = sum(data[i] for i in kept)
    spans = sum(records["batch_time"][i] for i in kept)
    return Steady(
        steps=kept,
        pauses=pauses,
        recurring=len(long) - len(paused),
        samples=int(sum(records["samples"][i] for i in kept)),
        seconds=seconds,
        data_time=waited / n,
        batch_time=(seconds - waited) / n,
        loop_time=(seconds - waited - spans) / n,
        typical_step=typical_step,
        typical_data=statistics.median(data[i] for i in kept),
    )
