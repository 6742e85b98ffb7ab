"""Live views of a sweep: what the running step costs, drawn on a throttle off the hot path.

The probe only appends numbers; a ticker thread reads them a few times a second and redraws.
``choose_view`` is the one place that decides between notebook, terminal and silent output;
tests force a frontend with ``set_frontend``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from speedlab.table import fmt

REFRESH_PER_SECOND = 4
_WINDOW = 20  # recent steps summarised in the live line

_frontend_override: str | None = None


def set_frontend(name: str | None) -> None:
    """Force ``"notebook"``, ``"terminal"`` or ``"none"``; ``None`` detects it again."""
    global _frontend_override
    _frontend_override = name


def detect_frontend() -> str:
    if _frontend_override is not None:
        return _frontend_override
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
        return "notebook"
    return "terminal"


@dataclass(frozen=True)
class Snapshot:
    """What the live line shows: figures of the most recent steps."""

    steps: int
    phase: str
    samples_per_s: float
    data_time: float
    batch_time: float
    total_steps: int | None


def snapshot(records: dict[str, list], total_steps: int | None) -> Snapshot | None:
    """Summarise the recent steps; safe while the training thread is still appending."""
    n = min(len(records[k]) for k in ("data_time", "batch_time", "wall", "samples", "phase"))
    if n == 0:
        return None
    lo = max(0, n - _WINDOW)
    wall = sum(records["wall"][lo:n])
    data = sorted(records["data_time"][lo:n])
    batch = sorted(records["batch_time"][lo:n])
    return Snapshot(
        steps=n,
        phase=records["phase"][n - 1],
        samples_per_s=sum(records["samples"][lo:n]) / wall if wall > 0 else float("nan"),
        data_time=data[len(data) // 2],
        batch_time=batch[len(batch) // 2],
        total_steps=total_steps,
    )


def format_snapshot(s: Snapshot, label: str) -> str:
    of = f"/{s.total_steps}" if s.total_steps else ""
    return (
        f"{label}  step {s.steps}{of}  {fmt(s.samples_per_s, '.1f')} samples/s  "
        f"data {fmt(s.data_time, '.2f', scale=1e3)} ms  batch {fmt(s.batch_time, '.2f', scale=1e3)} ms  "
        f"[{s.phase}]"
    )


class _Ticker:
    """Calls ``draw`` every 1/REFRESH_PER_SECOND seconds on a daemon thread until stopped."""

    def __init__(self, draw: Callable[[], None]) -> None:
        self._draw = draw
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="speedlab-live", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(1 / REFRESH_PER_SECOND):
            self._draw()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class LiveView:
    """A view that shows nothing; the base of the real views."""

    def start_sweep(self, spec: Any) -> None:
        self.spec = spec
        self.runs_total = len(spec.plan) * spec.repeat
        self.run_index = 0

    def start_run(self, knobs: Any, attempt: int) -> None:
        self.run_index += 1
        shown = " ".join(f"{k}={v}" for k, v in knobs.as_dict().items()) or "as written"
        repeat = f" #{attempt + 1}" if self.spec.repeat > 1 else ""
        self.label = f"run {self.run_index}/{self.runs_total} {shown}{repeat}"

    def watch(self, session: Any) -> None:
        self._session = session
        self._ticker = _Ticker(self._tick)

    def unwatch(self) -> None:
        self._ticker.stop()
        self._tick()

    def _tick(self) -> None:
        probe = self._session.active_probe
        if probe is None:
            return
        state = snapshot(probe.records, self.spec.controls.steps)
        if state is not None:
            self.draw(state)

    def draw(self, state: Snapshot) -> None:
        """Show the current state of the running step."""

    def end_run(self, result: Any) -> None:
        """Show a finished run."""

    def end_sweep(self, sweep: Any) -> None:
        """Show the comparison of all runs."""


class TerminalView(LiveView):
    """One line that rewrites itself, then a summary per run and the table at the end."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr

    def draw(self, state: Snapshot) -> None:
        self.stream.write("\r" + format_snapshot(state, self.label)[:160].ljust(100))
        self.stream.flush()

    def end_run(self, result: Any) -> None:
        self.stream.write(f"\r{self.label}: {result.summary_line()}".ljust(100) + "\n")
        for note in result.notes:
            self.stream.write(f"    note: {note}\n")
        self.stream.flush()

    def end_sweep(self, sweep: Any) -> None:
        if len(sweep.runs) > 1:
            self.stream.write(str(sweep.table()) + "\n")
            self.stream.flush()


class NotebookView(LiveView):
    """A display handle updated in place while a run trains; each finished run stays shown."""

    def start_run(self, knobs: Any, attempt: int) -> None:
        from IPython.display import HTML, display

        super().start_run(knobs, attempt)
        self._handle = display(HTML(f"<code>{self.label}: starting</code>"), display_id=True)

    def draw(self, state: Snapshot) -> None:
        from IPython.display import HTML

        self._handle.update(HTML(f"<code>{format_snapshot(state, self.label)}</code>"))

    def end_run(self, result: Any) -> None:
        import html

        from IPython.display import HTML

        notes = "".join(f"<br><small>note: {html.escape(n)}</small>" for n in result.notes)
        text = html.escape(f"{self.label}: {result.summary_line()}")
        self._handle.update(HTML(f"<code>{text}</code>{notes}"))


def choose_view(live: bool) -> LiveView:
    """The live view for this frontend; a silent one when ``live`` is off."""
    frontend = detect_frontend() if live else "none"
    if frontend == "notebook":
        return NotebookView()
    if frontend == "terminal":
        return TerminalView()
    return LiveView()
