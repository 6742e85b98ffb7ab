"""An XLA device (a TPU, or XLA's CPU runtime with ``PJRT_DEVICE=CPU``) through torch_xla:
lazy, compiled, asynchronous. Its steps are timed from XLA's own records, never by a wait
every step.

A step's operations are traced on the host, compiled into a graph where the graph is new (on
the host, inside the step), then run by the device while the host goes on. The timeline:

- waits for the device's outstanding work at the two edges of the steady window, so the
  window's seconds (samples/s) are the device's, the work still queued at its end included;
- moves each graph compilation out of the step's batch_time into the compile phase
  (``records["compile_time"]``, ``records["compiles"]``), from XLA's ``CompileTime`` metric;
- reads the device's busy time of each step from XLA's ``ExecuteTime`` metric (each graph's
  run, from launch to done): data_time is the part of the host's wait for the batch that the
  device spent idle (its work of the step before hides the rest), batch_time the rest of the
  step, the host's tracing included (as a slow launch is on a GPU);
- counts the host transfers made inside each step (``.item()``, a print of a tensor:
  ``records["host_transfers"]``), the usual cause of a graph cut in two or compiled again.

Written from torch_xla's metrics API and run on XLA's CPU runtime; not run on a TPU. torch_xla is
imported only when asked.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from speedlab.measure.devices.device import Device
from speedlab.measure.devices.events import Timeline
from speedlab.measure.steps import StepLog
from speedlab.results.run import XLA_RECORD_KEYS


@dataclass(frozen=True)
class XlaCounts:
    """XLA's running totals at one point of the host's step."""

    compiles: int = 0
    compile_s: float = 0.0
    executions: int = 0
    transfers: int = 0


XLA_PRECISIONS = ("32-true", "16-true", "bf16-true")
"""The precisions Lightning's XLA precision plugin takes (it has no mixed mode)."""


class XlaRuntime:
    """What the timeline asks torch_xla: its metrics, and a wait for the device's queue."""

    def __init__(self) -> None:
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met

        self._met, self._wait = met, xm.wait_device_ops

    def wait(self) -> None:
        """Wait until the device has run everything queued so far."""
        self._wait()

    def counts(self) -> XlaCounts:
        compile_time = self._met.metric_data("CompileTime") or (0, 0.0, [])
        transfers = self._met.counter_value("aten::_local_scalar_dense") or 0
        return XlaCounts(
            compiles=int(compile_time[0]),
            compile_s=compile_time[1] / 1e9,
            executions=int(self._met.counter_value("ExecuteComputation") or 0),
            transfers=int(transfers),
        )

    def executions(self) -> tuple[int, list[float]]:
        """How many graphs the device has run, and the seconds of the last ones (XLA keeps a
        window of them), oldest first."""
        data = self._met.metric_data("ExecuteTime")
        if not data:
            return 0, []
        return int(data[0]), [value / 1e9 for _, value in data[2]]


class XlaTimeline(Timeline):
    """A step's edges and its device work from XLA's records (module docstring).

    Stamps as ``EventTimeline``'s, so the probe treats both alike: XLA's running totals at a
    training batch's start and end, and a wait for the device as the first steady step begins
    waiting for its batch. Steps are resolved at the end of the fit (``wait``), or earlier where
    XLA's window of execution times would otherwise pass them by.
    """

    def __init__(self, warmup: int, runtime: Any = None, *, keep: int = 256) -> None:
        self._warmup = warmup
        self._made = runtime  # torch_xla's (XlaRuntime) when first asked, unless given
        self._keep = keep  # well inside XLA's window of execution times
        self._log: StepLog = StepLog(0.0)
        self._start: dict[int, XlaCounts] = {}
        self._steps: dict[int, tuple[XlaCounts, XlaCounts]] = {}
        self._drained: dict[int, float] = {}  # step: the host's wait for the device before it

    def watch(self, log: StepLog) -> None:
        self._log = log

    def fetch_start(self) -> None:
        if not self._log.fetches_inside and not self._log.held():
            self._origin()

    def epoch(self, epoch: int) -> None:
        self._origin()

    def start(self) -> None:
        if self._log.fetches_inside and not self._log.held():
            self._origin()
        self._start[len(self._log.steps)] = self._runtime.counts()

    def end(self) -> None:
        index = len(self._log.steps)
        if index in self._start:
            self._steps[index] = (self._start.pop(index), self._runtime.counts())

    def _origin(self) -> None:
        """The next step begins waiting for its batch: the first steady one waits for the
        device's work of the steps before it first."""
        index = len(self._log.steps)
        if index == self._warmup and index > 0:
            self._drained[index] = self._drain()

    @property
    def _runtime(self) -> Any:
        if self._made is None:
            self._made = XlaRuntime()
        return self._made

    def _drain(self) -> float:
        started = time.perf_counter()
        self._runtime.wait()
        return time.perf_counter() - started

    def resolve(self, records: dict[str, list], *, wait: bool = False) -> None:
        """Write the figures of recorded steps into ``records``; with ``wait``, wait for the
        device first and give the wait to the last step, whose work it was."""
        n = len(records["batch_time"])
        if wait and n:
            records["wall"][n - 1] += (waited := self._drain())
            records["batch_time"][n - 1] += waited
        elif len(self._steps) < self._keep:
            return
        for key in XLA_RECORD_KEYS:
            records[key] = records.get(key, []) + [0] * (n - len(records.get(key, [])))
        for index in [i for i in self._drained if 0 < i < n]:
            # The wait at the window's start was for the steps before it: the step before
            # it ends when the device is done, and the first steady step starts there.
            waited = self._drained.pop(index)
            for key in ("data_time", "host_data_time", "wall"):
                records[key][index] = max(0.0, records[key][index] - waited)
            records["wall"][index - 1] += waited
            records["batch_time"][index - 1] += waited
        executed, seconds = self._runtime.executions()
        first_kept = executed - len(seconds)
        for index in sorted(i for i in self._steps if i < n):
            before, after = self._steps.pop(index)
            runs = range(before.executions, after.executions)
            busy = sum(seconds[i - first_kept] for i in runs if i >= first_kept)
            self._write(records, index, before, after, busy if runs else None)

    @staticmethod
    def _write(
        records: dict[str, list],
        index: int,
        before: XlaCounts,
        after: XlaCounts,
        busy: float | None,
    ) -> None:
        compile_s = after.compile_s - before.compile_s
        records["compile_time"][index] = compile_s
        records["compiles"][index] = after.compiles - before.compiles
        records["host_transfers"][index] = after.transfers - before.transfers
        records["wall"][index] = max(0.0, records["wall"][index] - compile_s)
        if busy is None:  # no graph ran in the step: the host's split stands, less compiling
            records["batch_time"][index] = max(0.0, records["batch_time"][index] - compile_s)
            return
        # The device idled for what it had not been given yet: the batch (the host's wait for
        # the loader, as far as the device's work did not hide it) and the step's tracing,
        # which stays in batch_time as a slow launch does on a GPU.
        step = records["wall"][index]
        idle = max(0.0, step - busy)
        records["data_time"][index] = min(idle, records["host_data_time"][index])
        records["batch_time"][index] = step - records["data_time"][index]


def xla_hardware() -> str | None:
    """The hardware torch_xla's runtime is set to (``PJRT_DEVICE``: TPU, CPU, CUDA), None where
    unset; read without importing torch_xla."""
    chosen = os.environ.get("PJRT_DEVICE", "").strip().upper()
    return chosen or None


class XlaDevice(Device):
    """The XLA device of this process. Its graphs are compiled on the host and run behind it,
    so a step's figures come from XLA's own records (``XlaTimeline``).

    Example::

        XlaDevice().timeline(warmup=5)  # an XlaTimeline over torch_xla's metrics
    """

    type = "xla"
    asynchronous = True
    pins_memory = False  # the batch is copied to the device by XLA, not from pinned pages
    counts_flops = False  # counted, a step traces another graph, which XLA compiles again

    def __init__(self, probe: Callable[[], bool] | None = None) -> None:
        hardware = xla_hardware()
        self.name = "TPU" if hardware in (None, "TPU") else f"XLA device ({hardware})"
        self._probe = probe

    def is_available(self) -> bool:
        """Where torch_xla is installed and its runtime has a device."""
        if self._probe is not None:
            return self._probe()
        try:
            import torch_xla.runtime as xr
        except ImportError:
            return False
        return bool(xr.global_runtime_device_count())

    def timeline(self, warmup: int) -> XlaTimeline:
        return XlaTimeline(warmup)

    def refusal(self, knob: str, value: Any) -> str | None:
        """``--compile``, ``--pin-memory on``, a precision Lightning's XLA precision does not
        take and a strategy other than Lightning's XLA ones cannot act on an XLA device:
        refused."""
        if knob == "precision" and value not in (None, "amp", *XLA_PRECISIONS):
            return (
                f"--precision {value}: not available on the {self.name}: Lightning's XLA "
                f"precision takes {', '.join(XLA_PRECISIONS)} (amp runs as bf16-true)."
            )
        if knob == "compile" and value not in (None, "off"):
            return (
                f"--compile {value}: does not apply on the {self.name}: XLA compiles each "
                "step's graph itself, and torch.compile's code does not run there. Run without "
                "--compile."
            )
        if knob == "pin_memory" and value:
            return (
                f"--pin-memory on: does not apply on the {self.name}: XLA copies each batch to "
                "the device itself, not from pinned pages. Run without --pin-memory."
            )
        if knob == "strategy" and value not in (None, "auto") and "xla" not in str(value):
            return (
                f"--strategy {value}: not available on the {self.name}: Lightning spreads "
                "training over XLA devices with its XLA strategies only (auto picks xla). "
                "Run with --strategy auto."
            )
        return None

    def amp(self) -> tuple[str, str]:
        """Lightning's XLA precision has no mixed mode: bf16-true, which TPUs compute natively."""
        return "bf16-true", (
            f"precision=amp ran as bf16-true on the {self.name}: Lightning's XLA precision has "
            "no mixed mode, and TPUs compute bf16 natively (weights and math in bf16, no loss "
            "scaling)."
        )

    def matmul(self, level: str) -> tuple[str, bool]:
        """torch's float32 matmul precision is not XLA's: it changes nothing there."""
        return (
            f"matmul={level} changes nothing on the {self.name}: XLA chooses its own matmul "
            "precision (torch_xla's mat_mul_precision), not torch's."
        ), False
