"""The sweep chart and the pipeline timeline, built from known records and rendered with Agg."""

from __future__ import annotations

import pickle
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from speedlab.analysis.verdict import judge_sweep
from speedlab.notebook.plots import (
    epoch_starts,
    figure_bundle,
    main_spans,
    overlap,
    png_bytes,
    sweep_figure,
    timeline_figure,
    worker_spans,
)
from speedlab.results.run import RunResult, empty_records
from speedlab.results.sweep import SweepResult
from tests.nbexec import ROOT, execute


def steady_run(
    data_s: float, batch_s: float, *, steps: int = 30, epochs: int = 1, **knobs
) -> RunResult:
    """A run whose steps all took the same time, split over ``epochs``; stamps from 2 workers."""
    records = empty_records()
    t = 0.0
    for i in range(steps):
        records["t"].append(t)
        records["data_time"].append(data_s)
        records["batch_time"].append(batch_s)
        records["wall"].append(data_s + batch_s)
        records["samples"].append(8)
        records["phase"].append("steady")
        records["epoch"].append(i * epochs // steps)
        t += data_s + batch_s
    make = 1.5 * (data_s + batch_s)
    records["pipeline"] = {
        "worker": [i % 2 for i in range(steps)],
        "start": [i * (data_s + batch_s) for i in range(steps)],
        "end": [i * (data_s + batch_s) + make for i in range(steps)],
        "taken": [i * (data_s + batch_s) + make + 0.001 for i in range(steps)],
    }
    return RunResult(knobs=knobs, records=records)


@pytest.fixture(autouse=True)
def no_pyplot_figures():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before  # figures are built without pyplot's global state


def test_sweep_figure_stacks_times_and_shows_throughput_with_units() -> None:
    sweep = judge_sweep([steady_run(0.004, 0.006, workers=0), steady_run(0.001, 0.004, workers=2)])
    fig = sweep_figure(sweep)
    times, rates = fig.axes
    assert "ms" in times.get_xlabel() and "samples/s" in rates.get_xlabel()
    assert [t.get_text() for t in times.get_yticklabels()] == ["baseline", "workers=2"]
    # stacked: data_time bar, then batch_time bar starting where data_time ends
    data_bars, batch_bars = times.containers
    assert [round(b.get_width(), 3) for b in data_bars] == [4.0, 1.0]
    assert [round(b.get_x(), 3) for b in batch_bars] == [4.0, 1.0]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("data_time" in t for t in legend) and any("batch_time" in t for t in legend)
    assert any("2.00x" in t.get_text() for t in rates.texts)  # 800 vs 1600 samples/s
    assert png_bytes(fig).startswith(b"\x89PNG")


def test_sweep_figure_marks_a_failed_run() -> None:
    sweep = SweepResult([steady_run(0.001, 0.001), RunResult(knobs={"workers": 4}, error="boom")])
    assert any(t.get_text() == "failed" for t in sweep_figure(sweep).axes[1].texts)


def test_timeline_has_a_row_per_worker_and_the_main_process() -> None:
    run = steady_run(0.002, 0.008, steps=40, epochs=2, workers=2)
    fig = timeline_figure(run)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["worker 0", "worker 1", "main process"]
    assert ax.get_xlabel() == "time since the fit started (s)"
    bars = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bars) == 4  # main: waiting + training; one per worker
    assert sum(1 for text in ax.texts if "epoch 1 starts" in text.get_text()) == 1
    legend = " ".join(t.get_text() for t in fig.legends[0].get_texts())
    for words in ("data_time", "batch_time", "worker makes a batch", "takes it"):
        assert words in legend
    assert figure_bundle(fig)["image/png"]


def test_timeline_of_a_long_run_zooms_in_on_the_second_epoch_start() -> None:
    run = steady_run(0.001, 0.009, steps=300, epochs=2)
    ax = timeline_figure(run, steps=60).axes[0]
    start, end = ax.get_xlim()
    epoch_1 = epoch_starts(run.records)[1][1]
    assert start < epoch_1 < end
    assert end - start == pytest.approx(60 * 0.010, rel=0.05)
    assert "steps 131-190 of 300" in ax.get_title()
    zoomed = timeline_figure(run, start=0.5, end=0.7).axes[0]
    assert zoomed.get_xlim() == (0.5, 0.7)


def test_timeline_without_workers_says_the_main_process_loads() -> None:
    run = steady_run(0.003, 0.003)
    del run.records["pipeline"]
    ax = timeline_figure(run).axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["main process"]
    assert "main process loads each batch itself" in ax.get_title()


def test_result_methods_return_the_figures() -> None:
    run = steady_run(0.001, 0.002)
    assert run.timeline().axes and SweepResult([run]).plot().axes


def test_charts_are_figures_that_ipython_formats_as_png() -> None:
    from IPython.core.formatters import DisplayFormatter

    fig = SweepResult([steady_run(0.001, 0.002)]).plot()
    assert isinstance(fig, Figure)
    data, _ = DisplayFormatter().format(fig)  # no printer registered for Figure: _repr_png_
    assert data["image/png"].startswith(b"\x89PNG")
    assert type(pickle.loads(pickle.dumps(fig))) is type(fig)


SETUP = f"""\
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.records import run_of
from speedlab.results.sweep import SweepResult
run = run_of([0.002] * 6, [0.004] * 6)
sweep = SweepResult([run, run_of([0.001] * 6, [0.004] * 6, knobs={{"workers": 2}})])
"""
SHOWN_AS_FIGURE = "from matplotlib.figure import Figure\nprint(isinstance(_, Figure))"


@pytest.mark.slow  # starts a kernel
@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "first",
    [
        None,
        "import matplotlib.pyplot as plt",
        "%matplotlib inline\nimport matplotlib.pyplot as plt",
    ],
    ids=["no-matplotlib-line", "pyplot", "matplotlib-inline"],
)
def test_charts_show_one_image_in_a_fresh_kernel(first: str | None, tmp_path: Path) -> None:
    """As nbclient, JupyterLab and Notebook run a cell ending in ``sweep.plot()``: one PNG, with
    or without ``%matplotlib inline``, and the value stays a matplotlib Figure."""
    cells = [first, SETUP, "sweep.plot()", SHOWN_AS_FIGURE, "run.timeline()", SHOWN_AS_FIGURE]
    notebook = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(c) for c in cells if c is not None]
    )
    path = tmp_path / "charts.ipynb"
    nbformat.write(notebook, path)
    ran = execute(path, tmp_path, timeout=120).notebook
    charts = [c for c in ran.cells if c.source in ("sweep.plot()", "run.timeline()")]
    assert len(charts) == 2
    for cell in charts:
        images = [o for o in cell.outputs if "image/png" in o.get("data", {})]
        assert len(images) == 1, cell.outputs
        assert images[0].output_type == "execute_result"
    checks = [c for c in ran.cells if c.source == SHOWN_AS_FIGURE]
    assert ["".join(o.get("text", "") for o in c.outputs) for c in checks] == ["True\n"] * 2


@pytest.mark.parametrize(
    ("a", "b", "seconds"),
    [
        ([(0, 1)], [(0.5, 2)], 0.5),
        ([(0, 1), (2, 3)], [(0.5, 2.5)], 1.0),
        ([(0, 1)], [(1, 2)], 0.0),
        ([(0, 4)], [(1, 2), (3, 5)], 2.0),
        ([], [(0, 1)], 0.0),
    ],
)
def test_overlap(a, b, seconds) -> None:
    assert overlap(a, b) == pytest.approx(seconds)


def test_spans_from_records() -> None:
    run = steady_run(0.002, 0.003, steps=4, epochs=2)
    waits, trains = main_spans(run.records)
    assert waits[1] == pytest.approx((0.005, 0.007)) and trains[1] == pytest.approx((0.007, 0.010))
    assert [len(v) for v in worker_spans(run.records).values()] == [2, 2]
    assert epoch_starts(run.records) == [(0, 0.0), (1, pytest.approx(0.010))]
