"""RunResult and SweepResult: figures derived from records, tables, serialisation."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest

from speedlab.results.run import RunResult, SweepResult, empty_records


def run(
    data: list[float],
    batch: list[float],
    *,
    knobs: dict | None = None,
    warmup: int = 1,
    samples: int = 10,
) -> RunResult:
    records = empty_records()
    for i, (d, b) in enumerate(zip(data, batch)):
        records["t"].append(float(i))
        records["data_time"].append(d)
        records["batch_time"].append(b)
        records["wall"].append(d + b)
        records["samples"].append(samples)
        records["phase"].append("warmup" if i < warmup else "steady")
        records["epoch"].append(0)
    return RunResult(knobs=knobs or {}, records=records)


def test_figures_are_steady_state_medians() -> None:
    r = run([9.0, 0.1, 0.2, 0.3], [9.0, 0.4, 0.5, 0.9])
    assert r.steps == 4
    assert r.samples == 40
    assert r.data_time == pytest.approx(0.2)
    assert r.batch_time == pytest.approx(0.5)
    assert r.step_time == pytest.approx(0.7)
    assert r.data_share == pytest.approx(0.2 / 0.7)
    # throughput counts the steady steps only: 30 samples over 0.5 + 0.7 + 1.2 seconds
    assert r.samples_per_s == pytest.approx(30 / 2.4)
    assert r.data_summary.p10 < r.data_time < r.data_summary.p90


def test_no_steady_state_gives_nan_not_zero() -> None:
    r = run([0.1], [0.1], warmup=5)
    assert math.isnan(r.data_time) and math.isnan(r.samples_per_s)
    assert "samples/s" in r.summary_line()


def test_the_spread_of_a_run_with_workers_is_over_windows_of_whole_rounds() -> None:
    # Two workers deliver in bursts: two batches at once, then a wait for the next two.
    bursty = run([0.0, 0.3] * 10, [0.1] * 20, knobs={"workers": 2}, warmup=0)
    spread = bursty.throughput_summary
    assert spread.n == 5  # 20 steps in windows of 4
    assert spread.median == pytest.approx(40 / 1.0) and spread.iqr == pytest.approx(0.0)
    one_by_one = run([0.0, 0.3] * 10, [0.1] * 20, knobs={"workers": 0}, warmup=0)
    assert one_by_one.throughput_summary.n == 20
    assert one_by_one.throughput_summary.iqr == pytest.approx(100 - 25)
    # A short run keeps five windows: here of one round, two steps.
    assert run([0.0, 0.3] * 6, [0.1] * 12, knobs={"workers": 2}, warmup=0).throughput_summary.n == 6
    # Three workers, one of them slow: windows of three steps hold one batch of each worker.
    three = run([0.0, 0.0, 0.3] * 8, [0.1] * 24, knobs={"workers": 3}, warmup=0)
    assert three.throughput_summary.n == 8
    assert three.throughput_summary.iqr == pytest.approx(0.0)


def test_round_trip_through_dict_and_json() -> None:
    r = run([0.1, 0.2, 0.3], [0.3, 0.3, 0.3], knobs={"workers": 2})
    r.notes.append("a note")
    r.phases = {"setup": 1.5}
    r.host_syncs = {"steps": 3, "lines": [{"file": "train.py", "line": 7, "count": 3}]}
    back = RunResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.to_dict() == r.to_dict()
    assert back.samples_per_s == r.samples_per_s


def test_sweep_speedups_best_and_labels() -> None:
    base = run([0.2, 0.2, 0.2], [0.2, 0.2, 0.2], knobs={"workers": 0, "preload": "off"})
    fast = run([0.0, 0.0, 0.0], [0.2, 0.2, 0.2], knobs={"workers": 2, "preload": "off"})
    failed = RunResult(knobs={"workers": 4, "preload": "off"}, error="RuntimeError: boom")
    sweep = SweepResult([base, fast, failed], name="workers")
    assert base.speedup == pytest.approx(1.0)
    assert fast.speedup == pytest.approx(2.0)
    assert failed.speedup is None
    assert sweep.best is fast
    assert [r.label(sweep.baseline) for r in sweep.runs] == ["baseline", "workers=2", "workers=4"]
    # A search that kept the baseline (the faster run was within noise) says so through best.
    assert SweepResult([base, fast], chosen=base).best is base
    assert SweepResult([base, fast], chosen=base).to_dict(records=False)["best"] == 0
    assert sweep.to_dict(records=False)["best"] == 1


def test_table_text_html_csv(tmp_path: Path) -> None:
    base = run([0.2] * 11, [0.2] * 11, knobs={"workers": 0})
    fast = run([0.0] * 11, [0.2] * 11, knobs={"workers": 2})  # five windows of one round
    fast.notes.append("pin_memory=on has no effect without a CUDA GPU")
    same = run([0.2, 0.1, 0.3, 0.2, 0.3, 0.1], [0.2] * 6, knobs={"workers": 0})
    sweep = SweepResult([base, fast, same])
    text = str(sweep.table())
    cells = [re.split(r"\s{2,}", line) for line in text.splitlines()]
    assert cells[0][:4] == ["run", "samples/s", "speedup", "vs baseline"]
    assert cells[2][:4] == ["baseline", "25.0", "1.00x", "-"]
    assert cells[3][:4] == ["workers=2", "50.0", "2.00x", "faster"]
    assert cells[4][:4] == ["baseline", "25.0", "1.00x", "within noise"]
    assert "no effect" in cells[3][-1] and "noisy" not in cells[3][-1]
    assert cells[4][-1].startswith("noisy: the interquartile range is 53% of the median")
    html = sweep._repr_html_()
    assert html.count("<tr>") == 4 and "workers=2" in html
    path = sweep.to_csv(tmp_path / "sweep.csv")
    rows = list(csv.reader(path.open()))
    assert rows[0][:4] == ["run", "samples/s", "speedup", "vs baseline"]
    assert rows[2][:4] == ["workers=2", "50.0", "2.00x", "faster"]
    data = json.loads(sweep.to_json())
    assert [r["knobs"] for r in data["runs"]] == [{"workers": 0}, {"workers": 2}, {"workers": 0}]


def test_report_has_medians_spread_and_phases() -> None:
    r = run([0.01, 0.02, 0.03, 0.04], [0.05] * 4)
    r.phases = {"setup": 1.0, "steady": 2.0, "validation": 0.0}
    r.system = {"cpu_percent": 55.0, "peak_rss_bytes": 300e6}
    text = r.report()
    assert "data_time     30.00 ms   (p10" in text
    assert "setup 1.00 s" in text and "validation" not in text
    assert "peak RSS 300 MB" in text
