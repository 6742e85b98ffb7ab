"""What this Python session keeps between cells: the last sweep, read as ``speedlab.last``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speedlab.results.sweep import SweepResult

last: SweepResult | None = None
"""The SweepResult of the last ``%%profile_train`` cell, panel run or Python API call."""


def remember(sweep: SweepResult | None) -> SweepResult | None:
    """Keep ``sweep`` as the last result and return it."""
    global last
    last = sweep
    return sweep
