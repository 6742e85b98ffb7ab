"""How long an asynchronous device worked in one warm-up step, by its own record of the work.

Two events a step give the device's span of the step and its idle time for want of input, not
how much of the span the device worked: between its kernels it may sit idle while the host is
still queueing the next (a launch-bound step). The device's own trace of its kernels and copies
does tell, as Holistic Trace Analysis reads it from a whole trace after the fact; here one
warm-up step is traced (the figures leave warm-up out, so the tracing's cost touches none of
them), and its busy time splits the steady steps' device time three ways
(``speedlab.results.device.DeviceSplit``). The trace must leave nothing behind for the steps
after it: what a device's watch sets for it is put back at the fit's end.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol


class Trace(Protocol):
    """The device's work from when it was started: ``stop`` ends it once the device has done
    the work queued so far, and returns the work's (start, end) intervals in seconds."""

    source: str

    def stop(self) -> list[tuple[float, float]]: ...


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
    """Seconds covered by at least one interval: work on several streams at once counts once."""
    covered, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            covered += end - max(start, reach)
            reach = end
    return covered


class BusyWatch:
    """Traces the device's work in warm-up step ``step`` with ``trace`` (a new Trace, started).

    ``env``: variables the trace needs, set where the process has not set them, from the
    trace's start until ``close`` (the fit's end) puts them back. ``untraced``: why no step is
    traced here, kept in the result so that a missing figure says why.
    """

    def __init__(
        self,
        step: int,
        trace: Callable[[], Trace],
        env: Mapping[str, str] | None = None,
        untraced: str = "",
    ) -> None:
        self.step = step
        self._start = trace
        self._trace: Trace | None = None
        self._env = dict(env or {})
        self._unset: list[str] = []  # the variables set here, to unset at close
        self.untraced = untraced
        self.busy: float | None = None
        self.source = ""

    def enter(self, step: int) -> None:
        if step != self.step or self.busy is not None or self.untraced:
            return
        for name, value in self._env.items():
            if name not in os.environ:
                os.environ[name] = value
                self._unset.append(name)
        try:
            self._trace = self._start()
        except Exception:  # a trace of the user's is running: it keeps the device's record
            self._trace = None

    def exit(self) -> None:
        trace, self._trace = self._trace, None
        if trace is None:
            return
        failing = sys.exc_info()[1] is not None  # the step raised: its error is the one to see
        try:
            intervals = trace.stop()
        except Exception:
            if failing:
                return
            raise
        if intervals:  # a device's step does some work: none recorded is a trace that failed
            self.busy = busy_seconds(intervals)
            self.source = trace.source

    def close(self) -> None:
        """The fit ended: the step's trace stops if it was cut short, and ``env`` is put back."""
        try:
            self.exit()
        finally:
            for name in self._unset:
                os.environ.pop(name, None)
            self._unset.clear()

    def result(self) -> dict[str, Any]:
        """``{"step", "busy" (seconds), "source"}`` once the step was traced, ``{"untraced"}``
        where none may be; else empty."""
        if self.untraced:
            return {"untraced": self.untraced}
        if self.busy is None:
            return {}
        return {"step": self.step, "busy": self.busy, "source": self.source}


class ProfilerTrace:
    """torch.profiler's trace of one kind of activity (CUDA: the GPU's kernels, copies and
    memsets, as CUPTI records them on the GPU's own clock), its events of ``device_type``.
    The device is synchronized first (``synchronize``), so the trace holds the work queued."""

    def __init__(self, activity: str, device_type: str, synchronize: Callable[[], None]) -> None:
        from torch.autograd.profiler import _is_profiler_enabled
        from torch.profiler import ProfilerActivity, profile

        if _is_profiler_enabled:
            raise RuntimeError("a torch.profiler of the user's is running")
        self.source = f"torch.profiler's {activity} trace of one warm-up step"
        self._device_type = device_type
        self._synchronize = synchronize
        self._profile = profile(activities=[getattr(ProfilerActivity, activity)])
        self._profile.__enter__()

    def stop(self) -> list[tuple[float, float]]:
        from torch.autograd import DeviceType

        try:
            self._synchronize()
        finally:
            self._profile.__exit__(None, None, None)
        # A CUDA call: where TEARDOWN_CUPTI=1, kineto detaches CUPTI on the first one after the
        # trace, so now, not in the middle of a later trace (pytorch/kineto#1554).
        self._synchronize()
        kind = getattr(DeviceType, self._device_type)
        return [
            (event.time_range.start / 1e6, event.time_range.end / 1e6)  # microseconds
            for event in self._profile.events()
            if event.device_type == kind
        ]
