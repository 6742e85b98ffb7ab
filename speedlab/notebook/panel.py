"""The widget panel: pick knob values, Run, Stop, and watch a results table grow.

Why training runs in a background thread: a notebook kernel handles widget messages (a click
on Stop, a changed dropdown) only between cells. If Run trained in the kernel's main thread,
the cell would stay busy until the run ended and Stop could never arrive. So Run starts a
``speedlab-panel`` thread that runs one combination the way ``profile_train`` and the magic run
theirs (speedlab.notebook.entry); the main thread stays idle and answers clicks and other cells
at once. Stop asks the running Trainer to end after the current step (``trainer.should_stop``),
skips the remaining validation, and the run ends the usual way: its partial result is kept, its
workers are shut down and reaped. A subprocess would isolate more but would have to re-run the
cell's imports and data set-up on every click, and could not train the objects it holds.

While a panel run trains, Trainers built in other cells are measured as part of it (the knobs
patch the Trainer class for the run), and another run (a cell's, another panel's) is refused.

What Lightning prints and shows during a run goes into a collapsed section of the panel
(speedlab.notebook.capture).

Under the widgets the panel shows a static copy of its table and findings, for wherever the
widgets are not drawn: an HTML export opened without scripts or offline, a viewer that runs none,
a notebook reopened without its kernel. It is an output of its own, updated as each run ends: an
export shows one format of each output, and with the widgets' state stored (``nbconvert
--execute``'s default) that is the widget view, so beside it in one output the copy would be
dropped. The drawn widgets carry the CSS that hides the copy, so wherever they show (JupyterLab,
Notebook 7, nbclassic, an export whose widget scripts load) it does not show twice.

``show_panel`` is what ``%%profile_train --panel`` and ``%speedlab panel`` call.
"""

from __future__ import annotations

import html
import threading
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as widgets

from speedlab.analysis.findings import unique_findings
from speedlab.notebook import session
from speedlab.notebook.capture import ThreadOutput, current_request, replies_to
from speedlab.notebook.controls import (
    AS_WRITTEN,
    WHOLE,
    choices,
    hardware_limits,
    help_html,
    limit_note,
    tooltip,
    value_text,
)
from speedlab.notebook.diagnosis import findings_list_html
from speedlab.notebook.guessing import guess_field, said_before, typed_guess
from speedlab.notebook.live import NotebookView
from speedlab.notebook.panel_runs import (
    PanelRun,
    baseline_of,
    judged,
    noise_html,
    panel_sweep,
    results_table,
)
from speedlab.results.knobs import KNOBS, KnobError, Knobs
from speedlab.results.prediction import GuessError
from speedlab.results.sweep import SweepResult
from speedlab.results.table import Table
from speedlab.run.intercept import RunControls

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class _WidgetHandle:
    """A live-view output that is the panel's chart widget."""

    def __init__(self, target: widgets.HTML, bundle: dict[str, str]) -> None:
        self.target = target
        self.update(bundle)

    def update(self, bundle: dict[str, str]) -> None:
        self.target.value = bundle.get("text/html", html.escape(bundle.get("text/plain", "")))


class _PanelView(NotebookView):
    """The live view of one panel run: draws into the panel and can stop the run.

    Args:
        chart: the widget it draws into.
        request: the request that started the run (its Run click), which its drawings reply to.
    """

    def __init__(self, chart: widgets.HTML, request: dict[str, Any] | None) -> None:
        super().__init__(lambda bundle: _WidgetHandle(chart, bundle))
        self.request = request
        self.stop_requested = False
        self.session: Any = None

    def stop(self) -> None:
        """End the run after its current step; the ticker repeats it for Trainers made later."""
        self.stop_requested = True
        self._stop_session()

    def _stop_session(self) -> None:
        if self.session is not None:
            self.session.stop()

    def _tick(self, force: bool = False) -> None:
        if self.stop_requested:
            self._stop_session()
        with replies_to(self.request):  # the ticker's thread names no request of its own
            super()._tick(force)

    def end_sweep(self, sweep: Any) -> None:
        """The panel's table shows the comparison."""


class Panel:
    """An ipywidgets panel that runs ``train_fn`` with the knob values picked in its controls.

    Args:
        train_fn: a zero-argument callable with ordinary Lightning training (the cell).
        knobs: initial control values (e.g. the first combination of the magic's options).
        controls: run length and warm-up; ``controls.steps`` fills the steps box.
        name: a label shown on the panel and stored with each run in the run history.
        store: the run store path; ``None`` for the default, ``False`` to store nothing.

    Example::

        panel = Panel(train, controls=RunControls(steps=200))
        panel  # shows the widgets in a notebook
    """

    def __init__(
        self,
        train_fn: Callable[[], Any],
        *,
        knobs: Knobs | None = None,
        controls: RunControls | None = None,
        name: str | None = None,
        store: str | Path | bool | None = None,
    ) -> None:
        self.train_fn = train_fn
        self.base_controls = controls or RunControls()
        self.name = name
        self.store = store
        self.runs: list[PanelRun] = []
        self.findings: list[Any] = []
        self.baseline_knobs: Knobs | None = None
        self.thread: threading.Thread | None = None
        self.view: _PanelView | None = None
        self.limits = hardware_limits()
        self.controls = {name: self._control(name, knobs) for name in KNOBS}
        self.steps = widgets.BoundedIntText(
            value=self.base_controls.steps or 0,
            min=0,
            max=10**9,
            description="steps",
            tooltip="Training steps per run; 0 runs as long as the cell says.",
            layout=widgets.Layout(width="180px"),
        )
        self.guess = guess_field()
        self.run_button = widgets.Button(description="Run", button_style="primary", icon="play")
        self.stop_button = widgets.Button(description="Stop", icon="stop", disabled=True)
        self.repeat_button = widgets.Button(
            description="repeat baseline",
            icon="repeat",
            disabled=True,
            tooltip="Run the baseline again: the spread of its runs is the noise to beat.",
        )
        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        self.repeat_button.on_click(lambda _: self.repeat_baseline())
        self.help = widgets.HTML(
            "<small>Hover over a control for what its knob does; the last one you change is "
            "explained here.</small>"
        )
        self.status = widgets.HTML("Pick knob values and press Run. The first run is the baseline.")
        self.chart = widgets.HTML()
        self.table = widgets.HTML()
        self.diagnosis = widgets.HTML()
        self.errors = widgets.Output()
        self.library = ThreadOutput()
        self.library.widget.layout.display = "none"  # shown from the first run on
        self.handle: Any = None  # the display of the static copy, once shown
        self.static_class = f"speedlab-static-{uuid.uuid4().hex}"
        self.widget = widgets.VBox(
            [
                widgets.HTML(self._title_html() + self._hide_static_css()),
                widgets.GridBox(
                    [self._with_reason(n) for n in self.controls],
                    layout=widgets.Layout(grid_template_columns="repeat(2, 1fr)"),
                ),
                self.help,
                widgets.HBox(
                    [self.steps, self.guess, self.run_button, self.stop_button, self.repeat_button]
                ),
                self.status,
                self.chart,
                self.table,
                self.diagnosis,
                self.errors,
                self.library.widget,
            ]
        )

    # -- controls -------------------------------------------------------------------------

    def _control(self, name: str, knobs: Knobs | None) -> widgets.Dropdown:
        limited = self.limits.get(name, {})
        options = [AS_WRITTEN, *(v for v in choices(name) if v not in limited)]
        initial = getattr(knobs, name, None) if knobs is not None else None
        value = AS_WRITTEN if initial is None else value_text(initial)
        if value not in options:
            options.append(value)
        control = widgets.Dropdown(
            options=options,
            value=value,
            description=KNOBS[name].option,
            tooltip=tooltip(name, limited),
            disabled=WHOLE in limited,
            style={"description_width": "130px"},
            layout=widgets.Layout(width="300px"),
        )
        control.observe(lambda _: setattr(self.help, "value", help_html(name)), names="value")
        return control

    def _with_reason(self, name: str) -> widgets.Widget:
        limited = self.limits.get(name, {})
        if not limited:
            return self.controls[name]
        note = widgets.HTML(
            f'<div style="line-height:1.3;font-size:11px;opacity:.8">'
            f"{html.escape(limit_note(limited))}</div>",
            layout=widgets.Layout(width="300px"),
        )
        return widgets.VBox([self.controls[name], note])

    def chosen_knobs(self) -> Knobs:
        """The knob values picked in the controls (checked like any other knob value)."""
        values = {n: c.value for n, c in self.controls.items() if c.value != AS_WRITTEN}
        return Knobs(**values)

    def run_controls(self) -> RunControls:
        c = self.base_controls
        return RunControls(steps=self.steps.value or None, time=c.time, warmup=c.warmup)

    # -- actions --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def run(self, knobs: Knobs | None = None) -> threading.Thread | None:
        """Start a run with ``knobs`` (default: the controls) in a background thread."""
        if self.running:
            return None
        try:
            knobs = self.chosen_knobs() if knobs is None else knobs
            guess = typed_guess(self.guess)
        except (KnobError, GuessError) as err:
            self.status.value = f"<b>Not run:</b> {html.escape(str(err))}"
            return None
        baseline = self.baseline_knobs is None or knobs == self.baseline_knobs
        self.view = _PanelView(self.chart, current_request())
        self._set_running(True, knobs)
        self.library.widget.layout.display = None
        self.thread = threading.Thread(
            target=self._train,  # the steps as Run was pressed, not as the thread reads them
            args=(knobs, self.run_controls(), baseline, self.view, guess),
            name="speedlab-panel",
            daemon=True,
        )
        self.thread.start()
        return self.thread

    def repeat_baseline(self) -> threading.Thread | None:
        """Run the baseline's knobs again, to see how much runs vary by chance."""
        if self.baseline_knobs is None:
            return None
        return self.run(self.baseline_knobs)

    def stop(self) -> None:
        """End the running run after its current step; it keeps what it measured."""
        if self.running and self.view is not None:
            self.view.stop()
            self.status.value = "Stopping after the current step..."

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the running run has ended; False if it is still running after timeout."""
        if self.thread is not None:
            self.thread.join(timeout)
        return not self.running

    def _train(
        self, knobs: Knobs, controls: RunControls, baseline: bool, view: _PanelView, guess: Any
    ) -> None:
        from speedlab.notebook.entry import one_run, profile
        from speedlab.run.sweep import stopped_on_request

        with replies_to(view.request):  # the run's widget updates reply to what started it
            try:
                plan = one_run(knobs, controls, name=self.name or "panel")
                said = said_before(self.runs, knobs, guess, view, baseline=baseline)
                with self.library.capture():
                    sweep = profile(
                        self.train_fn,
                        view=view,
                        store=self.store,
                        show_error=self._show_error,
                        **plan,
                    )
                self.runs += [
                    PanelRun(judged(self.runs, said.kept(r)), baseline, stopped_on_request(r))
                    for r in sweep.runs
                ]
                if self.baseline_knobs is None and baseline_of(self.runs) is not None:
                    self.baseline_knobs = knobs  # the first run that measured, not one failed
                # The sweep's findings hold its best run's own: each is shown once.
                self.findings = unique_findings(
                    [*sweep.diagnosis, *(f for r in sweep.runs for f in r.diagnosis)]
                )
                self.diagnosis.value = _findings_html(self.findings)
            except Exception as err:  # the thread must not die with the buttons disabled
                self._show_error(err)
            finally:
                session.remember(self.sweep)
                self.table.value = self.table_html()
                self._set_running(False, knobs)
                if self.handle is not None:  # a saved notebook keeps the latest results
                    self.handle.update(self._repr_mimebundle_(), raw=True)

    def _show_error(self, err: BaseException) -> None:
        from speedlab.run.tracebacks import user_traceback

        lines = traceback.format_exception(type(err), err, user_traceback(err.__traceback__))
        self.errors.append_stderr("".join(lines))

    def _set_running(self, running: bool, knobs: Knobs) -> None:
        shown = " ".join(f"{k}={v}" for k, v in knobs.as_dict().items()) or "knobs as written"
        self.run_button.disabled = running
        self.repeat_button.disabled = running or self.baseline_knobs is None
        self.guess.disabled = self.repeat_button.disabled  # a guess needs a baseline
        self.stop_button.disabled, self.steps.disabled = not running, running
        for name, control in self.controls.items():
            control.disabled = running or WHOLE in self.limits.get(name, {})
        if running:
            self.status.value = f"Running {html.escape(shown)}..."
        elif self.runs:
            last = self.runs[-1]
            state = "failed" if last.result.error else "stopped" if last.stopped else "done"
            self.status.value = f"Run {len(self.runs)} {state}: {html.escape(shown)}."

    # -- results --------------------------------------------------------------------------

    @property
    def sweep(self) -> SweepResult | None:
        """All runs made in this panel, the first being the baseline, each judged against it
        when it ended."""
        return panel_sweep(self.runs, self.name)

    def results_table(self) -> Table | None:
        """One row per run (``panel_runs.results_table``); None before a run."""
        return results_table(self.runs)

    def table_html(self) -> str:
        """The results table and how to read its noise."""
        table = self.results_table()
        return "" if table is None else table._repr_html_() + noise_html(self.runs)

    def _title_html(self) -> str:
        return "<b>speedlab panel</b>" + (
            f" &middot; {html.escape(self.name)}" if self.name else ""
        )

    def _hide_static_css(self) -> str:
        """CSS, drawn with the widgets, that hides this panel's static copy and its output
        area (JupyterLab and Notebook 7, nbclassic): shown only where the widgets are not."""
        mine = f".{self.static_class}"
        return (
            f"<style>{mine}, .jp-OutputArea-child:has(> .jp-OutputArea-output > {mine}), "
            f".output_area:has(> .output_subarea > {mine}) {{display: none}}</style>"
        )

    def static_html(self) -> str:
        """The results so far, for front ends that do not show widgets (exports, viewers)."""
        parts = [
            f"{self._title_html()} <small>(a static copy of its results: the live panel needs a "
            "notebook with widgets)</small>",
            self.table_html() or "No runs yet.",
            _findings_html(self.findings),
        ]
        inner = "".join(f"<div>{part}</div>" for part in parts)
        return f'<div class="{self.static_class}">{inner}</div>'

    def static_text(self) -> str:
        """The results so far as plain text."""
        title = "speedlab panel" + (f" · {self.name}" if self.name else "")
        table = self.results_table()
        parts = [f"{title} (a static copy of its results)", str(table) if table else "No runs yet."]
        if self.findings:
            parts.append("Diagnosis:\n" + "\n".join(f"- {f}" for f in self.findings))
        return "\n\n".join(parts)

    def _repr_mimebundle_(self, **_: Any) -> dict[str, Any]:
        """The static copy of the results so far, as HTML and plain text."""
        return {"text/plain": self.static_text(), "text/html": self.static_html()}

    def _ipython_display_(self) -> None:
        """Show the widgets, then the static copy in an output of its own, updated as runs end
        so that a saved notebook keeps them."""
        from IPython.display import display

        # No plain text of the widgets (an export without their state shows it instead of the
        # view), but an empty one: an export warns of an output that has no format it can show.
        view = {WIDGET_VIEW: self.widget._repr_mimebundle_()[WIDGET_VIEW], "text/plain": ""}
        display(view, raw=True)
        self.handle = display(self._repr_mimebundle_(), raw=True, display_id=True)
        self.library.attach(current_request())


def _findings_html(findings: list[Any]) -> str:
    if not findings:
        return ""
    return f"<b>Diagnosis</b>{findings_list_html(findings)}"


def show_panel(
    train_fn: Callable[[], Any],
    *,
    knobs: Knobs | None = None,
    controls: RunControls | None = None,
    name: str | None = None,
) -> Panel:
    """Build and display a Panel for ``train_fn``; returns it (so tests and users can drive it)."""
    from IPython.display import display

    panel = Panel(train_fn, knobs=knobs, controls=controls, name=name)
    display(panel)
    return panel
