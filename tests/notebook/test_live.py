"""Live views: snapshots from records, the terminal line on a real TTY, notebook frames of real runs."""

from __future__ import annotations

import os
import re
import threading
import time
from itertools import pairwise

import lightning.pytorch as pl
import pytest

from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.system import SystemSample
from speedlab.notebook import live
from speedlab.notebook.live import (
    WINDOW,
    LiveView,
    NotebookView,
    TerminalView,
    choose_view,
    planned_steps,
    progress_line,
    snapshot,
)
from speedlab.notebook.livechart import bars_svg, live_html
from speedlab.results.run import empty_records
from speedlab.run.sweep import plan_sweep, run_sweep

QUIET = dict(accelerator="cpu", **QUIET_TRAINER)


def records_of(steps: int, data_s: float = 0.002, batch_s: float = 0.008, samples: int = 8) -> dict:
    records = empty_records()
    for i in range(steps):
        records["t"].append(i * (data_s + batch_s))
        records["data_time"].append(data_s)
        records["batch_time"].append(batch_s)
        records["wall"].append(data_s + batch_s)
        records["samples"].append(samples)
        records["phase"].append("warmup" if i < 5 else "steady")
        records["epoch"].append(0)
    return records


def sample(cpu: float | None, rss: int, workers: int) -> SystemSample:
    return SystemSample(
        t=0.0,
        cpu_percent=cpu,
        cpu_percent_per_core=None,
        iowait_percent=None,
        main_cpu_percent=None,
        workers_cpu_percent=None,
        rss_bytes=rss,
        workers=workers,
        shm_used_bytes=None,
        torch_threads=None,
        gpu_util_percent=None,
        gpu_mem_bytes=None,
    )


def test_snapshot_figures_progress_and_eta() -> None:
    s = snapshot(records_of(150), total_steps=200, elapsed=3.0, system=sample(87.0, 812_000_000, 2))
    assert s.steps == 150 and s.phase == "steady"
    assert s.samples_per_s == pytest.approx(8 / 0.010)
    assert (s.data_time, s.batch_time) == (0.002, 0.008)
    assert s.eta == pytest.approx(50 * 0.010)
    assert len(s.data_window) == WINDOW and s.first_step == 150 - WINDOW + 1
    assert (s.cpu_percent, s.rss_bytes, s.workers) == (87.0, 812_000_000, 2)


def test_snapshot_before_the_first_step_and_under_a_time_limit() -> None:
    s = snapshot(empty_records(), total_steps=None, elapsed=1.0, time_limit=10.0, phase="preload")
    assert (s.steps, s.phase, s.eta, s.data_window) == (0, "preload", 9.0, ())
    assert s.samples_per_s != s.samples_per_s  # NaN: nothing measured yet
    capped = snapshot(records_of(10), total_steps=10_000, elapsed=4.0, time_limit=5.0)
    assert capped.eta == pytest.approx(1.0)


def test_planned_steps_from_the_trainers_limits() -> None:
    assert planned_steps(pl.Trainer(max_steps=50, accumulate_grad_batches=2, **QUIET)) == 100
    assert planned_steps(pl.Trainer(max_epochs=3, **QUIET)) is None  # batches per epoch unknown yet
    trainer = pl.Trainer(max_epochs=2, **QUIET)
    trainer.fit(KnownCostModel(step_s=0.0), known_cost_loader(n=40, batch_size=8))
    assert planned_steps(trainer) == 10


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

    return run_sweep(train, plan_sweep({"workers": workers}, steps=steps), view=view, store=False)


def test_terminal_view_on_a_log_file_writes_summaries_only(tmp_path) -> None:
    with open(tmp_path / "log.txt", "w") as log:
        view = TerminalView(log)
        assert not view.live
        known_cost_sweep(view, [0, 1], steps=8)
    text = (tmp_path / "log.txt").read_text()
    assert "\r" not in text
    assert re.findall(r"^run (\d)/2 workers=\d: ", text, flags=re.M) == ["1", "2"]
    assert "samples/s" in text.splitlines()[-1] or "baseline" in text  # the table closes it


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
        gaps = [b[0] - a[0] for a, b in pairwise(frames[:-1])]
        assert min(gaps) >= 0.9 / live.REFRESH_PER_SECOND  # throttled (the last frame is forced)
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
