"""A run's comparison with its baseline, judged once when it was measured and kept with it.

The rule that judges (speedlab.analysis.compare) runs when a sweep is assembled; every view
(tables, the panel, ``verdicts``, the report) formats the stored ``Comparison``, so a sweep
reads the same on any machine and in any later session.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from speedlab.results.codec import Name, Record
from speedlab.results.stats import Summary

MIN_STEPS = 3
"""Fewest measurements (steps, windows of steps or replicates) a throughput needs before it
is compared."""
SAME = "the same configuration"
"""What ``Comparison.inert`` names when two runs differ in no knob: a user measuring the noise."""


class Verdict(Name):
    """Whether a run is faster than its baseline beyond the noise of both."""

    faster = "faster"
    slower = "slower"
    within_noise = "within noise"
    too_few = "too few to tell"  # fewer than MIN_STEPS measurements: no claim either way


TOO_FEW = Verdict.too_few.value


@dataclass(frozen=True)
class Comparison(Record):
    """Whether run ``b`` is faster or slower than run ``a`` beyond the noise of both.

    ``speedup`` is b's samples/s over a's. ``significant`` when the middle halves (q1-q3) of the
    two throughput distributions (``a`` and ``b``) do not overlap and the change is at least
    ``needed``, which grows when other processes took CPU during the runs. ``cores`` are those
    the runs could use. ``warnings`` say what weakens the judgement, ``noisy`` what to say of
    b's own spread where it is wide, and ``advice`` what would give enough measurements.
    ``inert`` names the knobs told apart where none of them acted (``SAME`` when none differ).
    """

    speedup: float
    significant: bool
    a: Summary
    b: Summary
    warnings: tuple[str, ...] = ()
    advice: str | None = None
    inert: tuple[str, ...] = ()
    needed: float = 0.0
    cores: int | None = None
    noisy: str | None = None

    @property
    def enough(self) -> bool:
        return min(self.a.n, self.b.n) >= MIN_STEPS

    @property
    def verdict(self) -> Verdict:
        if self.inert:
            return Verdict.within_noise
        if not self.enough:
            return Verdict.too_few
        if not self.significant:
            return Verdict.within_noise
        return Verdict.faster if self.speedup > 1 else Verdict.slower

    @property
    def decided(self) -> bool:
        """Whether the verdict is faster or slower, not within noise or too few to tell."""
        return self.verdict in (Verdict.faster, Verdict.slower)

    @property
    def overlap(self) -> bool:
        """Whether the middle halves (q1-q3) of the two throughput distributions overlap."""
        return not (self.a.q3 < self.b.q1 or self.b.q3 < self.a.q1)

    @property
    def reason(self) -> str | None:
        """Why the verdict is within noise or too few to tell, in a few words from the stored
        figures (``"+3%, under the 5% needed"``); None for faster and slower, and where the
        figures do not say (a speedup that is not a number).

        The first rule that holds back a verdict is named, in the order ``verdict`` asks them:
        knobs that changed nothing, too few measurements, a change smaller than ``needed``, and
        overlapping middle halves.
        """
        if self.inert == (SAME,):
            return "the same configuration ran twice"
        if self.inert:
            return f"{', '.join(self.inert)} changed nothing here"
        if not self.enough:
            return f"{self.a.n} and {self.b.n} measurements, {MIN_STEPS} needed"
        if self.decided or not math.isfinite(self.speedup):
            return None
        change = self.speedup - 1
        if abs(change) < self.needed:
            shown, needed = _percents(change, self.needed)
            return f"{shown}, under the {needed} needed"
        if self.overlap:
            return "middle halves overlap"
        return None

    def __str__(self) -> str:
        speedup = f"{self.speedup:.2f}x"
        if self.inert:
            return f"{speedup}, {self.verdict}: {self.reason}, so the difference is the machine's"
        if not self.enough:
            return f"{speedup}, {TOO_FEW} ({self.reason}: {self.advice})"
        spread = (
            f"middle halves {self.a.q1:.1f}-{self.a.q3:.1f} vs {self.b.q1:.1f}-{self.b.q3:.1f}"
            " samples/s"
        )
        reason = self.reason
        said = spread if reason in (None, "middle halves overlap") else f"{reason}; {spread}"
        return f"{speedup}, {self.verdict} ({said})"


def _percents(change: float, needed: float) -> tuple[str, str]:
    """A change (``+0.03``) and the change needed (``0.05``) as percentages, with a decimal
    where whole percents would show them equal (``+4.9%`` under ``5.0%``)."""
    for digits in (0, 1, 2):
        shown, wanted = f"{change:+.{digits}%}", f"{needed:.{digits}%}"
        if shown.lstrip("+-") != wanted:
            break
    return shown, wanted
