"""speedlab.notebook.tables: a sweep's table as text, HTML and CSV, each speedup judged."""

from __future__ import annotations

import csv
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from speedlab.analysis.verdict import judge_sweep
from speedlab.notebook.tables import SWEEP_COLUMNS, verdict_text
from speedlab.results.prediction import Guess, Prediction
from speedlab.results.sweep import SweepResult
from tests.records import run_of as run


def test_table_text_html_csv(tmp_path: Path) -> None:
    base = run([0.2] * 11, [0.2] * 11, knobs={"workers": 0})
    fast = run([0.0] * 11, [0.2] * 11, knobs={"workers": 2})  # five windows of one round
    fast = replace(fast, notes=["pin_memory=on has no effect without a CUDA GPU"])
    same = run([0.2, 0.1, 0.3, 0.2, 0.3, 0.1], [0.2] * 6, knobs={"workers": 0})
    sweep = judge_sweep([base, fast, same])
    text = str(sweep.table())
    cells = [re.split(r"\s{2,}", line) for line in text.splitlines()]
    assert cells[0][:4] == ["run", "samples/s", "speedup", "vs baseline"]
    assert cells[2][:4] == ["baseline", "25.0", "1.00x", "-"]
    assert cells[3][:4] == ["workers=2", "50.0", "2.00x", "faster"]
    # the same configuration again: within noise, and the row says why
    assert cells[4][:4] == [
        "baseline",
        "25.0",
        "1.00x",
        "within noise (the same configuration ran twice)",
    ]
    assert "no effect" in cells[3][-1] and "noisy" not in cells[3][-1]
    assert cells[4][-1].startswith("noisy: the interquartile range (the spread of the middle half")
    assert "is 53% of the median" in cells[4][-1]
    assert "noisy" not in cells[2][-1]  # the baseline's spread is narrow
    html = sweep._repr_html_()
    assert html.count("<tr>") == 4 and "workers=2" in html
    path = sweep.to_csv(tmp_path / "sweep.csv")
    rows = list(csv.reader(path.open()))
    assert rows[0][:4] == ["run", "samples/s", "speedup", "vs baseline"]
    assert rows[2][:4] == ["workers=2", "50.0", "2.00x", "faster"]
    data = json.loads(sweep.to_json())
    assert [r["knobs"] for r in data["runs"]] == [{"workers": 0}, {"workers": 2}, {"workers": 0}]


def test_a_wide_spread_is_noted_only_where_it_decides_the_verdict() -> None:
    base = run([0.2, 0.1, 0.3, 0.2, 0.3, 0.1], [0.2] * 6, knobs={"matmul": "highest"})
    fast = run([0.0] * 6, [0.02] * 6, knobs={"matmul": "high"})  # ten times faster, noise or not
    rows = judge_sweep([base, fast]).table().rows
    assert rows[1][3] == "faster" and not any("noisy" in row[-1] for row in rows)
    same = run([0.2, 0.1, 0.3, 0.2, 0.3, 0.1], [0.2] * 6, knobs={"matmul": "medium"})
    rows = judge_sweep([base, fast, same]).table().rows
    assert rows[2][3] == "within noise (+0%, under the 5% needed)"
    assert [row[-1].startswith("noisy:") for row in rows] == [True, False, True]


def test_the_preload_break_even_is_in_the_table() -> None:
    without = run([0.09] * 20, [0.01] * 20, knobs={"preload": "off"})
    with_it = run([0.0] * 20, [0.01] * 20, knobs={"preload": "ram"})
    with_it = replace(with_it, phases={"preload": 3.0})
    notes = judge_sweep([without, with_it]).table().rows[1][-1]
    assert notes.startswith("preload break-even: after 34 steps (0.3 s of training)")


def test_the_html_table_spaces_its_cells_itself() -> None:
    # nbclassic's widget styles set table-cell padding to 0: the table brings its own.
    html = SweepResult([run([0.2] * 8, [0.2] * 8, knobs={"workers": 0})]).table()._repr_html_()
    cells = re.findall(r"<t[dh] style=\"([^\"]*)\"", html)
    # no guesses and no device trace: no "your guess" column, no device split
    assert len(cells) == 2 * (len(SWEEP_COLUMNS) - 2)
    assert all("padding:2px 10px" in style for style in cells)
    assert cells[0].endswith("text-align:left") and cells[1].endswith("text-align:right")


def test_every_column_is_described_on_hover_and_in_the_legend() -> None:
    """A lesson prints ``table.legend()``; the notebook shows the same lines on hover."""
    table = SweepResult([run([0.2] * 8, [0.2] * 8, knobs={"workers": 0})]).table()
    assert table.columns == [c for c in SWEEP_COLUMNS if c not in OPTIONAL]
    assert set(table.descriptions) == set(table.columns)
    titles = re.findall(r'<th style="[^"]*" title="([^"]*)">([^<]*)</th>', table._repr_html_())
    assert [name for _, name in titles] == table.columns
    legend = table.legend().splitlines()
    assert [line.split("  ")[0].strip() for line in legend] == table.columns
    said = dict(zip(table.columns, legend, strict=True))
    assert "data_time / (data_time + batch_time)" in said["data share"]
    assert "whole machine" in said["CPU %"] and "workers' own pages" in said["peak RSS MB"]
    assert "pauses left out" in said["samples/s"] and "hooks and logging" in said["batch_time ms"]
    assert "device's peak" in said["MFU"] and "unknown" in said["MFU"]


OPTIONAL = ("your guess", "device busy / input / launches ms")


def test_a_devices_split_of_a_step_shows_where_it_traced_its_work() -> None:
    traced = replace(run([0.002] * 20, [0.010] * 20), device="cuda", device_busy={"busy": 0.004})
    table = judge_sweep([traced, run([0.002] * 20, [0.010] * 20)]).table()
    split = table.columns.index("device busy / input / launches ms")
    assert [row[split] for row in table.rows] == ["4.00 / 2.00 / 6.00", "-"]
    assert (
        "waiting for the host's launches"
        in dict(zip(table.columns, table.legend().splitlines()))[
            "device busy / input / launches ms"
        ]
    )


def test_predictions_and_guesses_show_beside_the_measurement() -> None:
    """speedlab's prediction (labelled, never a figure of the run) and the learner's guess with
    whether it held; a prediction far off says why in the notes."""
    base = run([0.024] * 20, [0.01] * 20, knobs={"workers": 0})
    faster = run([0.001] * 20, [0.015] * 20, knobs={"workers": 3})
    faster = replace(
        faster,
        prediction=Prediction(3.0, "workers=3: ...", 3.0, 3.0, data_time=0.001, batch_time=0.010),
        guess=Guess.parse("faster"),
    )
    table = judge_sweep([base, faster]).table()
    shown = dict(zip(table.columns, table.rows[1], strict=True))
    assert shown["predicted"] == "about 3.0x" and shown["your guess"] == "faster, right"
    assert (
        "predicted about 3.0x, measured 2.12x: batch_time 15.0 ms where 10.0 ms" in shown["notes"]
    )
    assert dict(zip(table.columns, table.rows[0]))["predicted"] == "-"


@pytest.mark.parametrize(
    ("base", "other", "verdict"),
    [
        # ten steps of each: a run that waited half as long is plainly faster
        (([0.2] * 10, [0.2] * 10), ([0.1] * 10, [0.2] * 10), "faster"),
        # two steady steps each (the first step is warm-up), the second run's one round of its
        # two workers: too few, and the row says how many
        (
            ([0.2] * 3, [0.2] * 3),
            ([0.1] * 3, [0.2] * 3),
            "too few to tell (2 and 1 measurements, 3 needed)",
        ),
        # middle halves that overlap, for all the change in the medians
        (
            ([0.1, 0.3, 0.1, 0.3, 0.1, 0.3, 0.1, 0.3, 0.1, 0.3], [0.2] * 10),
            ([0.0, 0.3, 0.0, 0.3, 0.0, 0.3, 0.0, 0.3, 0.0, 0.3], [0.2] * 10),
            "within noise (middle halves overlap)",
        ),
    ],
)
def test_the_verdict_column_says_why_a_verdict_is_not_decided(
    base: tuple, other: tuple, verdict: str
) -> None:
    a, b = run(*base, knobs={"workers": 0}), run(*other, knobs={"workers": 2})
    sweep = judge_sweep([a, b])
    assert verdict_text(sweep.runs[1], sweep.runs[0]) == verdict
    assert sweep.table().rows[1][3] == verdict
    assert verdict_text(sweep.runs[0], sweep.runs[0]) == "-"
