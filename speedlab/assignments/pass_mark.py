"""The pass mark: a speedup well inside what the intended fix reaches on this machine.

The slow pipeline waits for storage between steps. Its intended fix, DataLoader workers (or
preloading), hides that wait; what is left of a step is its compute, plus the CPU that
decoding and augmenting take, shared over the cores. From the reference's own figures:

    reach = (data_time + batch_time) / (batch_time + data_time * loader_busy / cores)

``loader_busy`` is the share of the loading that kept the CPU busy (the doctor's measure,
``speedlab.analysis.data.loader_busy``); where it is unknown all of the loading is counted as
CPU. The pass mark lies half-way between 1x and that reach, and never above ``MAX_PASS_MARK``,
so a correct solution passes with a margin even when the machine is a little noisy.
"""

from __future__ import annotations

from speedlab.analysis.data import loader_busy
from speedlab.results.run import RunResult

MAX_PASS_MARK = 2.0
"""The pass mark on a machine where the fix reaches far: twice the reference's samples/s."""


def reach(reference: RunResult, cores: float) -> float:
    """The speedup of the reference once its wait for data is hidden (see the module)."""
    busy = loader_busy(reference)
    loading_cpu = reference.data_time * (1.0 if busy is None else busy)
    return reference.step_time / (reference.batch_time + loading_cpu / max(cores, 1))


def pass_mark(references: list[RunResult], cores: float) -> float:
    """Half-way between 1x and the furthest reach of the reference runs, at most MAX_PASS_MARK.

    The furthest is the least disturbed: other processes' load lengthens the reference's
    batch_time and so shortens its reach, which would lower the mark on a busy machine.
    """
    reached = max(reach(run, cores) for run in references)
    return min(MAX_PASS_MARK, 1.0 + (reached - 1.0) / 2)
