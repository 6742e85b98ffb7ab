"""Live views of a sweep: what the running steps cost, drawn on a throttle off the hot path.

Each view extends speedlab.run.watch.LiveView, which samples the run's records on a throttle
and hands each ``Snapshot`` to the view's ``draw``.

- ``NotebookView``: one display output per run, updated in place through its display id (works
  in JupyterLab 4, Notebook 7 and VS Code). A finished run's output is replaced by its summary,
  a chart of all its steps and its pipeline timeline, and stays. Frontends that do not show
  live output (nbclient, nbconvert) apply the updates to the saved output, so the notebook ends
  with the static results. The sweep ends with the comparison chart (the magic then shows the
  table and the diagnosis).
- ``TerminalView``: one line rewritten in place on a TTY (cleared properly before the next
  output), a summary line per finished run and the table at the end.

Before each run after the baseline both show speedlab's prediction of it and the learner's
guess, if any, in one labelled line (speedlab.notebook.guessing): the terminal as it is said,
the notebook above the run's chart and summary, where it stays.

``choose_view`` is the one place that decides between notebook, terminal and silent output;
tests force a frontend with ``set_frontend``.
"""

from __future__ import annotations

import html
import shutil
import sys
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from speedlab.notebook.guessing import said_line
from speedlab.notebook.livechart import duration, live_html, mfu_shown, ms, run_html
from speedlab.results.table import fmt
from speedlab.run.watch import LiveView, Snapshot

_CLEAR_LINE = "\x1b[K"

_frontend_override: str | None = None


def set_frontend(name: str | None) -> None:
    """Force ``"notebook"``, ``"terminal"`` or ``"none"``; ``None`` detects it again."""
    global _frontend_override
    _frontend_override = name


def detect_frontend() -> str:
    if _frontend_override is not None:
        return _frontend_override
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    # A kernel's shell, or a subclass of it (Google Colab's): outputs go to a notebook frontend.
    if any(cls.__name__ == "ZMQInteractiveShell" for cls in type(shell).__mro__):
        return "notebook"
    return "terminal"


def _isatty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_line(s: Snapshot, label: str) -> str:
    """The terminal's one-line progress."""
    progress = f"step {s.steps}"
    if s.total_steps:
        done = min(10, round(10 * s.steps / s.total_steps))
        progress = f"[{'#' * done}{'-' * (10 - done)}] {s.steps}/{s.total_steps}"
    parts = [
        f"{label}  {progress}",
        f"ETA {duration(s.eta)}",
        f"{fmt(s.samples_per_s, ',.0f')} samples/s",
        *mfu_shown(s.mfu),
        f"data {ms(s.data_time)} batch {ms(s.batch_time)}",
        *([f"device {s.device_split.text()}"] if s.device_split else []),
        s.phase.replace("_", " "),
    ]
    if s.cpu_percent is not None:
        parts.append(f"CPU {s.cpu_percent:.0f}%")
    if s.rss_bytes is not None:
        parts.append(f"RSS {s.rss_bytes / 1e6:,.0f} MB")
    return "  ".join(parts)


class TerminalView(LiveView):
    """One line rewritten in place on a TTY and a summary per run.

    On a stream that is not a TTY (a log file, CI) the live line is left out: only the run
    summaries are written. The table is the result's to show (the magic displays it, a script
    prints it), so it appears once.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = _isatty(self.stream)

    def predicted(self, label: str, prediction: Any, guess: Any) -> None:
        self.stream.write(said_line(label, prediction, guess) + "\n")
        self.stream.flush()

    def draw(self, state: Snapshot) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1
        self.stream.write("\r" + progress_line(state, self.label)[:width] + _CLEAR_LINE)
        self.stream.flush()

    def end_run(self, result: Any) -> None:
        if self.live:
            self.stream.write("\r" + _CLEAR_LINE)
        self.stream.write(f"{self.label}: {result.summary_line()}\n")
        for note in result.notes:
            self.stream.write(f"    note: {note}\n")
        self.stream.flush()


class Handle(Protocol):
    """An output area that can be redrawn: a display id in a notebook, a widget in the panel."""

    def update(self, bundle: dict[str, str]) -> None: ...


class DisplayHandle:
    """A notebook output of the running cell, updated in place through its display id."""

    def __init__(self, bundle: dict[str, str]) -> None:
        from IPython.display import display

        self._handle = display(bundle, raw=True, display_id=True)

    def update(self, bundle: dict[str, str]) -> None:
        self._handle.update(bundle, raw=True)


class NotebookView(LiveView):
    """A live chart per run, replaced by the run's summary when it ends; the sweep chart at the end.

    Args:
        publish: makes a new output from a display bundle and returns its ``Handle``
            (default: a ``DisplayHandle``, an output of the running cell).
        timeline: put the run's pipeline timeline under its summary (a matplotlib PNG, drawn
            after the run, in a collapsed section).
    """

    live = True

    def __init__(
        self, publish: Callable[[dict[str, str]], Handle] | None = None, *, timeline: bool = True
    ) -> None:
        self.publish = publish or DisplayHandle
        self.timeline = timeline
        self.said: str | None = None  # said of the next run before it starts

    def predicted(self, label: str, prediction: Any, guess: Any) -> None:
        self.said = said_line(label, prediction, guess)

    def start_run(self, knobs: Any, attempt: int) -> None:
        super().start_run(knobs, attempt)
        self.before, self.said = self.said, None
        self.handle = self.publish(self._bundle(f"<code>{self.label}: starting</code>", self.label))

    def _bundle(self, html_text: str, text: str) -> dict[str, str]:
        """The run's output, under what was said of it before it started."""
        if self.before is None:
            return _bundle(html_text, text)
        said = f'<div class="speedlab-said">{html.escape(self.before)}</div>'
        return _bundle(said + html_text, f"{self.before}\n{text}")

    def draw(self, state: Snapshot) -> None:
        text = progress_line(state, self.label)
        self.handle.update(self._bundle(live_html(state, self.label, self.frame), text))

    def end_run(self, result: Any) -> None:
        png = _timeline_png(result) if self.timeline and result.steps else None
        text = f"{self.label}: {result.summary_line()}"
        self.handle.update(self._bundle(run_html(result, self.label, timeline_png=png), text))

    def end_sweep(self, sweep: Any) -> None:
        if len(sweep.runs) > 1 and any(run.steps for run in sweep.runs):
            from speedlab.notebook.plots import figure_bundle

            self.publish(figure_bundle(sweep.plot()))


def _bundle(html_text: str, text: str) -> dict[str, str]:
    return {"text/html": html_text, "text/plain": text}


def _timeline_png(result: Any) -> str:
    import base64

    from speedlab.notebook.plots import png_bytes

    return base64.b64encode(png_bytes(result.timeline(), dpi=72)).decode()


def choose_view(live: bool) -> LiveView:
    """The live view for this frontend; a silent one when ``live`` is off."""
    frontend = detect_frontend() if live else "none"
    if frontend == "notebook":
        return NotebookView()
    if frontend == "terminal":
        return TerminalView()
    return LiveView()
