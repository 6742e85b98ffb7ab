"""Live views: the terminal line on a real TTY, notebook frames of real runs, the chart."""

from __future__ import annotations

import os
import re
import threading
import time
from itertools import pairwise

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.notebook import live
from speedlab.notebook.live import NotebookView, TerminalView, choose_view, progress_line
from speedlab.notebook.livechart import bars_svg, live_html
from speedlab.run.intercept import RunControls
from speedlab.run.sweep import plan_sweep, run_sweep
from speedlab.run.watch import REFRESH_PER_SECOND, WINDOW, LiveView, snapshot
from tests.records import records_of, sample

QUIET = dict(accelerator="cpu", **QUIET_TRAINER)


def test_chart_is_labelled_and_clips_a_spike() -> None:
    data, batch = [0.001] * 40, [0.004] * 40
    batch[10] = 0.5  # an epoch start far above the rest
    svg = bars_svg(data, batch, first_step=61, slots=WINDOW)
    assert svg.count("<path") == 3 and "#f28e2b" in svg and "#4e79a7" in svg  # + the spike mark
    for text in ("data_time", "batch_time", "ms per step", "training step", ">61<", ">100<"):
        assert text in svg
    assert "cut, up to 501 ms" in svg  # the spike keeps its value
    assert "<path" not in bars_svg([], [], first_step=1, slots=WINDOW)


def test_live_frame_shows_progress_rate_phase_and_system() -> None:
    s = snapshot(records_of(150), total_steps=200, elapsed=3.0, system=sample(87.0, 812_000_000, 2))
    frame = live_html(s, "run 1/2 workers=2", frame=7)
    assert 'data-frame="7"' in frame and 'data-step="150"' in frame
    for text in ("step 150 / 200", "ETA 0.5 s", "800 samples/s", "steady", "CPU 87%", "RSS 812 MB"):
        assert text in frame
    line = progress_line(s, "run 1/2")
    assert line.startswith("run 1/2  [########--] 150/200") and "CPU 87%" in line
    assert "MFU" not in frame and "MFU" not in line  # not counted: nothing, not a dash


def test_the_line_and_the_frame_show_the_mfu_once_known() -> None:
    s = snapshot(records_of(150), flops_per_sample=1e6, peak=800 * 1e6 / 0.046)  # 800 samples/s
    assert "800 samples/s  MFU 4.6%  data 2.0 ms" in progress_line(s, "run 1/1")
    assert "800 samples/s &middot; MFU 4.6% &middot; data" in live_html(s, "run 1/1", frame=1)


def test_the_line_and_the_frame_split_the_devices_time_once_traced() -> None:
    s = snapshot(records_of(150), device_busy=0.003)
    said = "device busy 3.0 ms, idle for input 2.0 ms, idle for launches 5.0 ms"
    assert said in progress_line(s, "run 1/1")
    assert said.replace("device ", "device: ") in live_html(s, "run 1/1", frame=1)
    assert "idle for launches" not in progress_line(snapshot(records_of(150)), "run 1/1")


def test_terminal_view_rewrites_one_line_on_a_real_tty() -> None:
    main, secondary = os.openpty()
    stream = os.fdopen(secondary, "w")
    try:
        view = TerminalView(stream)
        assert view.live
        view.label = "run 1/1"
        state = snapshot(records_of(20), total_steps=40)
        view.draw(state)
        view.draw(state)
        written = ""
        deadline = time.monotonic() + 2
        while written.count("\x1b[K") < 2 and time.monotonic() < deadline:
            written += os.read(main, 10_000).decode()  # a pty may hand the two writes over apart
        assert written.count("\r") == 2 and written.count("\x1b[K") == 2 and "\n" not in written
    finally:
        stream.close()
        os.close(main)


def known_cost_sweep(view: LiveView, workers: list[int], steps: int = 60):
    def train() -> None:
        loader = known_cost_loader(n=8 * 1000, batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.012), loader)

    return run_sweep(
        train,
        plan_sweep({"workers": workers}, controls=RunControls(steps=steps)),
        view=view,
        store=False,
    )


def test_terminal_view_on_a_log_file_writes_summaries_only(tmp_path) -> None:
    with open(tmp_path / "log.txt", "w") as log:
        view = TerminalView(log)
        assert not view.live
        known_cost_sweep(view, [0, 1], steps=8)
    text = (tmp_path / "log.txt").read_text()
    assert "\r" not in text
    assert re.findall(r"^run (\d)/2 workers=\d: ", text, flags=re.M) == ["1", "2"]
    assert "vs baseline" not in text  # the table is the result's to show, once, not the view's


class Output:
    """A publish target that keeps every bundle it is given, with the time."""

    def __init__(self, outputs: list[Output], bundle: dict) -> None:
        self.bundles = [(time.perf_counter(), bundle)]
        outputs.append(self)

    def update(self, bundle: dict) -> None:
        self.bundles.append((time.perf_counter(), bundle))


def test_notebook_view_draws_a_few_frames_a_second_and_keeps_each_run() -> None:
    outputs: list[Output] = []
    sweep = known_cost_sweep(NotebookView(publish=lambda b: Output(outputs, b)), [0, 2], steps=80)
    run_outputs, chart = outputs[:2], outputs[2]
    for output, run in zip(run_outputs, sweep.runs, strict=True):
        frames = [
            (t, b["text/html"]) for t, b in output.bundles if "speedlab-live" in b["text/html"]
        ]
        steps = [int(re.search(r'data-step="(\d+)"', html).group(1)) for _, html in frames]
        assert len(frames) >= 3 and steps == sorted(steps) and steps[-1] == run.steps
        assert f"MFU {run.mfu:.1%}" in frames[-1][1]  # the last frame's steps are the run's
        gaps = [b[0] - a[0] for a, b in pairwise(frames[:-1])]
        assert min(gaps) >= 0.9 / REFRESH_PER_SECOND  # throttled (the last frame is forced)
        final = output.bundles[-1][1]
        assert "speedlab-run" in final["text/html"] and run.summary_line() in final["text/plain"]
        assert "data:image/png;base64" in final["text/html"]  # the pipeline timeline
    assert "image/png" in chart.bundles[0][1]  # the sweep ends with the comparison chart
    assert not [t for t in threading.enumerate() if t.name == "speedlab-live"]


def test_choose_view_follows_the_frontend() -> None:
    live.set_frontend("notebook")
    assert type(choose_view(True)) is NotebookView
    live.set_frontend("terminal")
    assert type(choose_view(True)) is TerminalView
    assert type(choose_view(False)) is LiveView and not LiveView.live


@pytest.mark.slow  # starts a kernel
def test_without_a_live_frontend_the_notebook_keeps_the_static_results() -> None:
    """nbclient (as nbconvert) applies the live updates to the saved outputs: only results stay."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cell = (
        "%%profile_train --workers 0,1 --steps 30\n"
        "import lightning.pytorch as pl\n"
        "from speedlab.labs import KnownCostModel, known_cost_loader\n"
        "pl.Trainer(max_epochs=1, accelerator='cpu', logger=False, enable_checkpointing=False,\n"
        "           enable_progress_bar=False, enable_model_summary=False)"
        ".fit(KnownCostModel(step_s=0.01), known_cost_loader(n=800))\n"
    )
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in ("%load_ext speedlab", cell)]
    )
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    shown = [o["data"] for o in nb.cells[1].outputs if o["output_type"] == "display_data"]
    html = [d.get("text/html", "") for d in shown]
    assert sum("speedlab-run" in h for h in html) == 2
    assert not any("speedlab-live" in h for h in html)  # no frame left half-way
    assert any("image/png" in d for d in shown) and any("speedlab-table" in h for h in html)
