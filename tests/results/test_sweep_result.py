"""SweepResult: speedups over the baseline, the best run, labels, the exported best."""

from __future__ import annotations

import pytest

from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from tests.records import run_of as run


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
