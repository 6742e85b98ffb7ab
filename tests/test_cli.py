"""Tests for speedlab.cli: the ``speedlab`` command (demo, system, history, explain)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from speedlab.cli import main
from speedlab.run.knobs import explain

SCRIPT = Path(sys.executable).with_name("speedlab")


def test_demo_generates_the_lab_trains_and_prints_the_breakdown(tmp_path: Path) -> None:
    """The installed console script, on an empty dataset cache: its first use, in full."""
    pytest.importorskip("lightning", reason="the demo trains with Lightning")
    env = {**os.environ, "SPEEDLAB_CACHE": str(tmp_path / "cache")}
    start = time.perf_counter()
    done = subprocess.run(
        [str(SCRIPT), "demo", "--steps", "40"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("speedlab demo: the image lab")
    for line in ("samples/s", "data_time", "batch_time", "data share", "phases", "CPU"):
        assert f"\n{line}" in out, line
    assert "(1280 samples in 40 steps)" in out and "peak RSS" in out
    assert "p10" in out and "p90" in out
    assert "LeafSpec" not in done.stderr  # Lightning's own deprecation, not the user's
    assert any((tmp_path / "cache").glob("shapes-*/manifest.json")), "dataset not generated"
    assert seconds < 60, f"demo took {seconds:.0f} s with a 40-step run"


@pytest.mark.parametrize("argv", [["demo", "--steps", "0"], ["demo", "--workers", "-1"]])
def test_bad_demo_arguments_are_named_before_anything_runs(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert "demo: --steps must be >= 1 and --workers >= 0" in capsys.readouterr().err


def test_explain_prints_the_knobs_text(capsys) -> None:
    assert main(["explain", "workers"]) == 0
    assert capsys.readouterr().out.strip() == explain("workers").strip()
    with pytest.raises(SystemExit):
        main(["explain", "warp-drive"])
    assert "invalid choice: 'warp-drive'" in capsys.readouterr().err


def test_system_and_history_print(capsys) -> None:
    assert main(["system"]) == 0
    assert "cores" in capsys.readouterr().out.lower()
    assert main(["history", "5"]) == 0
    assert capsys.readouterr().out.strip()
