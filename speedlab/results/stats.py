"""Robust summaries of per-step timings: median with p10/p90 and the interquartile range."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Summary:
    """Median and spread of a sample; NaN everywhere for an empty sample."""

    median: float
    p10: float
    p90: float
    q1: float
    q3: float
    n: int

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def relative_iqr(self) -> float:
        """IQR over the median: the noise of a measurement, as torch.utils.benchmark reports it."""
        return self.iqr / self.median if self.median > 0 else math.nan

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize(values: Sequence[float]) -> Summary:
    n = len(values)
    if n == 0:
        nan = math.nan
        return Summary(nan, nan, nan, nan, nan, 0)
    if n == 1:
        v = float(values[0])
        return Summary(v, v, v, v, v, 1)
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    quartiles = statistics.quantiles(values, n=4, method="inclusive")
    return Summary(
        median=float(statistics.median(values)),
        p10=deciles[0],
        p90=deciles[-1],
        q1=quartiles[0],
        q3=quartiles[-1],
        n=n,
    )
