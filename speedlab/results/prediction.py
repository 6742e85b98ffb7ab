"""Predictions of a run's speedup, made before it ran: speedlab's own and the learner's.

speedlab predicts each run after the baseline from the baseline's measured split of a step
(speedlab.analysis.predict); a learner may say a guess first (``--predict``). Both are kept
with the run and shown beside what it measured, labelled as predictions, never as figures.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from speedlab.results.codec import Name, Record

FAR_OFF = 0.25
"""Relative distance between a measured speedup and the predicted one (outside the predicted
range) from which a prediction is called off, and the run says why in words."""
SAME_BAND = 0.05
"""A change of samples/s within this of 1.0x counts as the same for a guessed direction: the
smallest change the comparison ever calls significant."""


@dataclass(frozen=True)
class Prediction(Record):
    """speedlab's prediction of a run's speedup over its baseline, made before the run.

    ``speedup`` is the expected samples/s over the baseline's; ``low`` and ``high`` bound it
    where a range is honest (otherwise both equal ``speedup``). ``data_time`` and
    ``batch_time`` are the step's parts the prediction expects (seconds), which explain a gap
    to the measured run. Where the baseline's split cannot predict a knob, ``speedup`` is None
    and ``reason`` says why. ``reason`` is one sentence: what the prediction rests on.
    """

    speedup: float | None
    reason: str
    low: float | None = None
    high: float | None = None
    data_time: float | None = None
    batch_time: float | None = None

    @property
    def made(self) -> bool:
        return self.speedup is not None and math.isfinite(self.speedup)

    @property
    def ranged(self) -> bool:
        return self.made and self.low is not None and self.high is not None and self.high > self.low

    def text(self) -> str:
        """The prediction in a few words: ``about 3.2x``, ``1.0x to 2.0x``, or ``none``."""
        if not self.made:
            return "none"
        if self.ranged and _shown(self.low) != _shown(self.high):
            return f"{_shown(self.low)} to {_shown(self.high)}"
        return f"about {_shown(self.speedup)}"

    def off_by(self, measured: float | None) -> float | None:
        """How far a measured speedup lies outside the predicted range, relative to the nearer
        end (0.0 inside it); None where either is not a number."""
        if not self.made or measured is None or not math.isfinite(measured):
            return None
        low = self.low if self.low is not None else self.speedup
        high = self.high if self.high is not None else self.speedup
        if measured < low:
            return low / measured - 1 if measured > 0 else math.inf
        if measured > high:
            return measured / high - 1
        return 0.0

    def __str__(self) -> str:
        return f"predicted {self.text()}: {self.reason}" if self.made else self.reason


class Direction(Name):
    """Which way a learner guessed a run would go."""

    faster = "faster"
    same = "same"
    slower = "slower"


class GuessError(ValueError):
    """A guess that is neither a direction nor a number; the message is one line."""


_NUMBER = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*x?\s*$", re.IGNORECASE)
_WORDS = {
    "faster": Direction.faster,
    "quicker": Direction.faster,
    "same": Direction.same,
    "the same": Direction.same,
    "no change": Direction.same,
    "slower": Direction.slower,
}
ALLOWED_GUESSES = "faster, same, slower, or a speedup such as 2 or 1.5x"


@dataclass(frozen=True)
class Guess(Record):
    """A learner's guess of a run's speedup, said before it ran: a direction, or a number
    (``speedup``), whose direction is kept too."""

    said: str
    direction: Direction
    speedup: float | None = None

    @classmethod
    def parse(cls, text: str) -> Guess:
        """The guess a learner typed: ``faster``, ``same``, ``slower`` or a speedup (``2``,
        ``1.5x``); anything else raises ``GuessError`` naming what is allowed."""
        said = " ".join(str(text).split())
        word = _WORDS.get(said.lower())
        if word is not None:
            return cls(said, word)
        number = _NUMBER.match(said)
        if number is None or float(number.group(1)) <= 0:
            raise GuessError(f"guess {said!r}: not allowed. Expected {ALLOWED_GUESSES}.")
        speedup = float(number.group(1))
        return cls(said, direction_of(speedup), speedup)

    def text(self) -> str:
        return _shown(self.speedup) if self.speedup is not None else str(self.direction)

    def right(self, measured: float | None, decided: bool) -> bool | None:
        """Whether the guess held: its direction against the measured run (``decided``: the
        comparison called it faster or slower beyond noise; otherwise it ran the same). A
        number also has to be within ``FAR_OFF`` of the measured speedup. None where the run
        measured nothing."""
        if measured is None or not math.isfinite(measured):
            return None
        happened = direction_of(measured) if decided else Direction.same
        if self.speedup is not None:
            return abs(measured / self.speedup - 1) <= FAR_OFF
        return self.direction == happened


def direction_of(speedup: float) -> Direction:
    """The direction of a speedup: the same within ``SAME_BAND`` of 1.0x."""
    if abs(speedup - 1) < SAME_BAND:
        return Direction.same
    return Direction.faster if speedup > 1 else Direction.slower


def _shown(speedup: float | None) -> str:
    return f"{speedup:.1f}x" if speedup is not None else "-"
