"""The widget panel driven without a browser: controls, Run in a thread, Stop, the growing table."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import ipywidgets as widgets
import lightning.pytorch as pl
import nbformat
import psutil
import pytest
from IPython.core.error import UsageError
from IPython.display import display
from IPython.utils.capture import capture_output

import speedlab
from speedlab.analysis.compare import compare
from speedlab.analysis.predict import guess_text, predict
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure import devices
from speedlab.notebook.controls import WHOLE
from speedlab.notebook.guessing import said_line
from speedlab.notebook.panel import WIDGET_VIEW, Panel, hardware_limits
from speedlab.notebook.tables import verdict_text
from speedlab.results.knobs import KNOBS, Knobs, explain
from speedlab.results.prediction import ALLOWED_GUESSES, Guess
from speedlab.run.intercept import RunControls

QUIET = dict(accelerator="cpu", **QUIET_TRAINER)


def train_fn(threads: list[str] | None = None, epochs: int = 1):
    """Known-cost training with 2 workers; records the thread it ran in."""

    def train() -> None:
        if threads is not None:
            threads.append(threading.current_thread().name)
        loader = known_cost_loader(n=8 * 2000, batch_size=8, busy_s=0.0005, num_workers=2)
        pl.Trainer(max_epochs=epochs, **QUIET).fit(KnownCostModel(step_s=0.004), loader)

    return train


def texts(widget: widgets.Widget) -> list[str]:
    """Every HTML text in a widget tree."""
    found = [widget.value] if isinstance(widget, widgets.HTML) else []
    for child in getattr(widget, "children", ()):
        found += texts(child)
    return found


def wait_for_steps(panel: Panel, steps: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r'data-step="(\d+)"', panel.chart.value)
        if found and int(found.group(1)) >= steps:
            return
        time.sleep(0.05)
    pytest.fail(f"the live chart never reached step {steps}: {panel.chart.value[:200]}")


def test_one_control_per_knob_with_its_explanation() -> None:
    panel = Panel(train_fn(), knobs=Knobs(workers=2, batch_size=100), store=False)
    assert list(panel.controls) == list(KNOBS)
    for name, control in panel.controls.items():
        assert control.tooltip.endswith(explain(name)) and control.description == KNOBS[name].option
        if WHOLE in panel.limits.get(name, {}):  # why it cannot be used comes first
            assert control.tooltip.startswith("not available: ")
    assert panel.controls["workers"].value == "2"
    assert panel.controls["batch_size"].value == "100"  # a value the list lacked is added
    assert panel.chosen_knobs() == Knobs(workers=2, batch_size=100)
    panel.controls["precision"].value = "bf16-mixed"
    assert "Mixed precision" in panel.help.value  # the last knob changed is explained


def test_what_a_cpu_cannot_use_is_disabled_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "DEVICES", {"cpu": devices.CpuDevice})  # a CPU-only machine
    limits = hardware_limits()
    panel = Panel(train_fn(), store=False)
    assert "16-mixed" not in panel.controls["precision"].options
    assert "bf16-mixed" in panel.controls["precision"].options
    assert panel.controls["pin_memory"].disabled
    shown = " ".join(texts(panel.widget))
    assert "16-mixed not offered: fp16 mixed precision needs a GPU" in shown
    assert "not available: pinned memory only speeds up copies to a CUDA GPU" in shown
    assert set(limits) >= {"precision", "pin_memory"}


def test_run_trains_in_a_background_thread_and_stop_leaves_nothing_behind() -> None:
    threads: list[str] = []
    before = set(psutil.Process().children(recursive=True))
    panel = Panel(train_fn(threads, epochs=-1), store=False)  # trains until stopped
    assert panel.stop_button.disabled
    thread = panel.run()
    assert thread is not None and thread.name == "speedlab-panel"
    assert panel.run_button.disabled and not panel.stop_button.disabled
    wait_for_steps(panel, 10)
    children = set(psutil.Process().children(recursive=True)) - before
    assert len(children) >= 2  # the run's DataLoader workers
    started = time.monotonic()
    panel.stop()
    assert panel.wait(timeout=30)
    assert time.monotonic() - started < 10
    assert threads == ["speedlab-panel"]
    [row] = panel.runs
    assert row.stopped and row.result.steps >= 10 and row.result.error is None
    assert "Stopped on request" in " ".join(row.result.notes)
    assert "stopped" in panel.table.value and panel.table.value.count("<tr>") == 2

    def alive() -> bool:
        return any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)

    deadline = time.monotonic() + 10  # workers exit on their own schedule on a busy machine
    while alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive()
    assert not [t.name for t in threading.enumerate() if t.name.startswith("speedlab")]
    assert not panel.run_button.disabled and panel.stop_button.disabled
    assert speedlab.last.runs == [row.result]


def test_table_grows_with_speedup_over_the_repeated_baseline() -> None:
    panel = Panel(train_fn(), controls=RunControls(steps=12, warmup=2), store=False)
    assert panel.steps.value == 12
    assert panel.repeat_button.disabled  # no baseline yet
    panel.run().join()
    panel.controls["workers"].value = "0"
    panel.run().join()
    panel.repeat_baseline().join()
    assert [r.baseline for r in panel.runs] == [True, False, True]
    assert [r.result.steps for r in panel.runs] == [12, 12, 12]
    table = panel.table.value
    assert table.count("<tr>") == 4
    assert "baseline (repeat)" in table and "workers=0" in table
    assert "The baseline ran 2 times" in table
    first, second = panel.runs[0].result, panel.runs[1].result
    assert f"{second.samples_per_s / first.samples_per_s:.2f}x" in table
    # The verdict column is the magic's: the run's comparison with the baseline, judged once.
    assert second.comparison == compare(first, second)
    # within noise and too few to tell carry their reason, as in the magic's table
    assert f">{html.escape(verdict_text(second, first))}</td>" in table
    assert verdict_text(second, first).startswith(str(second.comparison.verdict))
    assert re.search(r"±\d+\.\d%", table)  # the noise column
    shown = re.findall(r"<li>(.*?)</li>", panel.diagnosis.value)
    assert shown and len(shown) == len(set(shown))  # each finding once


def test_a_first_run_that_failed_is_no_baseline_and_steps_are_read_as_run_is_pressed() -> None:
    attempts = []

    def train() -> None:
        attempts.append(1)
        if len(attempts) == 1:
            raise ValueError("the cell's bug, fixed before the next click")
        loader = known_cost_loader(n=8 * 200, batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.002), loader)

    panel = Panel(train, controls=RunControls(steps=12, warmup=2), store=False)
    panel.run().join()
    assert panel.status.value.startswith("Run 1 failed") and panel.repeat_button.disabled
    thread = panel.run()
    assert panel.steps.disabled  # the run trains the steps it was started with
    panel.steps.value = 30
    thread.join()
    panel.controls["workers"].value = "0"
    panel.run().join()
    failed, base, other = (row.result for row in panel.runs)
    assert failed.error and base.steps == 12 and not panel.steps.disabled
    assert other.comparison == compare(base, other) and panel.sweep.baseline is base
    assert f"{other.samples_per_s / base.samples_per_s:.2f}x" in panel.table.value


def test_a_guess_typed_before_run_is_kept_beside_speedlabs_prediction() -> None:
    panel = Panel(train_fn(), controls=RunControls(steps=12, warmup=2), store=False)
    assert panel.guess.disabled  # no baseline yet to guess against
    panel.run().join()
    assert not panel.guess.disabled
    panel.controls["workers"].value = "0"
    panel.guess.value = "sooner"
    assert panel.run() is None and len(panel.runs) == 1  # refused: nothing runs
    expected = f"guess 'sooner': not allowed. Expected {ALLOWED_GUESSES}."
    assert panel.status.value == f"<b>Not run:</b> {html.escape(expected)}"
    panel.guess.value = " Slower "
    panel.run().join()
    assert panel.guess.value == ""  # a guess is of one run
    base, run = (row.result for row in panel.runs)
    assert base.prediction is None and base.guess is None
    assert run.guess == Guess.parse("Slower") and run.knobs == Knobs(workers=0)
    # No workers: no hand-over to measure; the prediction is the baseline's own arithmetic.
    assert run.prediction == predict(base, Knobs(workers=0)) and run.prediction.made
    # Shown above the run's chart before it trained, and kept above its summary.
    assert html.escape(said_line("workers=0", run.prediction, run.guess)) in panel.chart.value
    header = re.search(r"<tr>(.*?)</tr>", panel.table.value, re.DOTALL).group(1)
    assert ">predicted</th>" in header and ">your guess</th>" in header
    for text in (run.prediction.text(), guess_text(run)):
        assert f">{html.escape(text)}</td>" in panel.table.value
    assert guess_text(run).startswith("slower, ")  # and whether it held


def test_magics_show_the_panel_for_the_cell(shell, capsys) -> None:
    with pytest.raises(UsageError, match="no cell profiled yet"):
        shell.run_line_magic("speedlab", "panel")
    before = speedlab.last
    shell.run_cell_magic(
        "profile_train", "--panel --workers 2 --steps 20", "raise RuntimeError('not run')"
    )
    assert speedlab.last is before  # the panel shows; nothing trains until Run
    # A shell without widgets prints the panel's static copy of its results.
    assert "speedlab panel" in capsys.readouterr().out
    shell.run_line_magic("speedlab", "panel")
    assert "No runs yet." in capsys.readouterr().out
    magics = shell.magics_manager.registry["SpeedlabMagics"]
    _, spec = magics.last_cell
    assert spec.plan[0] == Knobs(workers=2) and spec.controls.steps == 20


def test_under_the_widgets_the_panel_shows_a_static_copy_of_its_results(shell) -> None:
    """The copy is an output of its own, updated as a run ends; the widgets hide it where they
    are drawn, and their output has no text to show where they are not."""
    panel = Panel(train_fn(), controls=RunControls(steps=12, warmup=2), store=False)
    with capture_output() as shown:
        display(panel)
    view, static = shown.outputs
    assert set(view.data) == {WIDGET_VIEW, "text/plain"} and view.data["text/plain"] == ""
    assert view.data[WIDGET_VIEW]["model_id"] == panel.widget.model_id
    assert static.data == panel._repr_mimebundle_()
    assert static.data["text/html"].startswith(f'<div class="{panel.static_class}">')
    assert all("No runs yet." in text for text in static.data.values())
    hide = f"<style>.{panel.static_class}, "
    assert [t for t in texts(panel.widget) if hide in t] == [panel.widget.children[0].value]
    with capture_output() as updated:
        panel.run().join()
    [update] = [o for o in updated.outputs if o.update]
    assert update.transient == static.transient  # the same display: the copy is replaced
    bundle = update.data
    assert bundle == panel._repr_mimebundle_()
    assert bundle["text/html"].count("<tr>") == 2  # the header and the run
    assert re.search(r"\n1 +baseline +[\d,.]+ +1\.00x", bundle["text/plain"])
    for finding in panel.findings:
        assert str(finding) in bundle["text/plain"]
        assert html.escape(finding.title) in bundle["text/html"]
        assert html.escape(finding.details) in bundle["text/html"]


EXPORTED = [
    "%load_ext speedlab",
    """\
import lightning.pytorch as pl
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.notebook.panel import show_panel
from speedlab.run.intercept import RunControls

def train():
    # 16 ms of sleep a batch against a 10 ms step: the doctor always has a finding to show.
    loader = known_cost_loader(n=8 * 200, batch_size=8, sleep_s=0.002)
    pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER).fit(KnownCostModel(), loader)

panel = show_panel(train, controls=RunControls(steps=20))
""",
    "panel.run()\npanel.wait();",
]


@pytest.mark.slow
def test_an_nbconvert_export_shows_the_panels_results_with_and_without_the_widgets_state(
    tmp_path: Path,
) -> None:
    """nbconvert runs the notebook as a grader's export does, storing the widgets' state, and its
    HTML then shows the widget output as the widgets alone; a notebook saved by JupyterLab has no
    state, and its HTML shows that output's plain text, empty. In both the panel's static copy,
    updated as the run ended, shows the results (tests/browser/test_export.py opens them)."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in EXPORTED])
    nbformat.write(notebook, tmp_path / "panel.ipynb")
    jupyter = [str(Path(sys.executable).parent / "jupyter"), "nbconvert"]
    execute = ["--to", "notebook", "--execute", "--output", "run.ipynb", "panel.ipynb"]
    run = subprocess.run([*jupyter, *execute], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    notebook = nbformat.read(tmp_path / "run.ipynb", as_version=4)
    view, static = notebook.cells[1].outputs
    state = notebook.metadata.widgets["application/vnd.jupyter.widget-state+json"]["state"]
    assert view.data["text/plain"] == "" and view.data[WIDGET_VIEW]["model_id"] in state
    text = static.data["text/plain"]
    assert re.search(r"\n1 +baseline +[\d,.]+ +1\.00x +- +- +- +±[\d.]+% .* 20 +ok\n", text), text
    assert "Diagnosis:\n- [" in text
    del notebook.metadata["widgets"]
    nbformat.write(notebook, tmp_path / "saved.ipynb")

    for name in ("run", "saved"):
        export = ["--to", "html", "--no-prompt", f"{name}.ipynb"]
        done = subprocess.run([*jupyter, *export], cwd=tmp_path, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "not able to be represented" not in done.stderr  # nbconvert's warning
        page = (tmp_path / f"{name}.html").read_text()
        page = re.sub(r"<script.*?</script>", "", page, flags=re.DOTALL)  # the widgets' state
        rows = re.findall(r"<tr>(.*?)</tr>", page.split('<table class="speedlab-table">')[1])
        cells = re.findall(r"<td[^>]*>([^<]*)</td>", rows[1])
        assert cells[:2] == ["1", "baseline"] and cells[-2:] == ["20", "ok"], name
        assert "<b>Diagnosis</b><ul><li>" in page, name


def test_a_panel_run_is_stored_and_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "panel.sqlite"
    panel = Panel(train_fn(), controls=RunControls(steps=8, warmup=2), name="panelled", store=path)
    panel.controls["workers"].value = "1"
    panel.run().join()
    [row] = speedlab.history(path=path)
    assert row["sweep"] == "panelled" and row["knobs"] == {"workers": 1}
    [run] = speedlab.load(row["sweep_id"], store=path).runs
    shown = panel.runs[0].result
    assert run.knobs == shown.knobs == Knobs(workers=1)
    assert run.steps == shown.steps == 8 and run.samples_per_s == shown.samples_per_s
