"""SweepResult: speedups over the baseline, the best run, labels, the stored form."""

from __future__ import annotations

import json

import pytest

from speedlab.analysis.verdict import judge_sweep
from speedlab.results.comparison import Verdict
from speedlab.results.findings import Finding, Kind
from speedlab.results.knobs import Knobs
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from tests.records import run_of as run


def test_sweep_speedups_best_and_labels() -> None:
    base = run([0.2] * 6, [0.2] * 6, knobs={"workers": 0, "preload": "off"})
    fast = run([0.0] * 6, [0.2] * 6, knobs={"workers": 2, "preload": "off"})
    failed = RunResult(knobs={"workers": 4, "preload": "off"}, error="RuntimeError: boom")
    sweep = judge_sweep([base, fast, failed], name="workers")
    judged_base, judged_fast, judged_failed = sweep.runs
    assert judged_base.speedup == pytest.approx(1.0)
    assert judged_fast.speedup == pytest.approx(2.0)
    assert judged_failed.speedup is None
    assert sweep.best is judged_fast
    assert [r.label(sweep.baseline) for r in sweep.runs] == ["baseline", "workers=2", "workers=4"]
    # Judging makes new results: the runs it was handed are as they were.
    assert base.comparison is None and fast.speedup is None
    # A search that kept the baseline (the faster run was within noise) says so through best.
    kept = judge_sweep([base, fast], chosen=base)
    assert kept.best is kept.baseline
    assert kept.to_dict(records=False)["best"] == 0
    assert sweep.to_dict(records=False)["best"] == 1


def test_a_sweep_comes_back_from_json_whole_and_shows_the_same_text() -> None:
    base = run([0.2] * 8, [0.2] * 8, knobs={"workers": 0})
    fast = run([0.0] * 8, [0.2] * 8, knobs={"workers": 2})
    sweep = judge_sweep([base, fast], name="workers", notes=["a sweep note"])
    back = SweepResult.from_json(sweep.to_json())
    assert str(back) == str(sweep)
    assert back._repr_html_() == sweep._repr_html_()
    assert back.to_dict() == sweep.to_dict()
    assert all(isinstance(f, Finding) and isinstance(f.kind, Kind) for f in back.diagnosis)
    assert all(isinstance(r.knobs, Knobs) for r in back.runs)
    assert back.runs[1].knobs["workers"] == 2 and back.runs[1].knobs.get("preload") is None
    assert back.runs[1].comparison.verdict is Verdict.faster
    assert back.best is back.runs[1]
    # The stored judgement is shown, not judged again: a changed rule would not change it.
    stored = json.loads(sweep.to_json())
    stored["runs"][1]["comparison"]["significant"] = False
    assert SweepResult.from_dict(stored).runs[1].comparison.verdict is Verdict.within_noise


def test_a_sweep_of_another_format_is_refused_in_one_line() -> None:
    sweep = judge_sweep([run([0.2] * 8, [0.2] * 8)])
    stored = sweep.to_dict() | {"format": 99}
    with pytest.raises(ValueError, match=r"^A stored sweep of format 99: this speedlab reads"):
        SweepResult.from_dict(stored)


def test_results_are_not_changed_after_they_are_built() -> None:
    sweep = judge_sweep([run([0.2] * 8, [0.2] * 8)])
    with pytest.raises(AttributeError):
        sweep.runs[0].error = "changed"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        sweep.name = "changed"  # type: ignore[misc]
