"""A lesson run as a course's pipeline runs it: papermill's command line, a parameter changed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import papermill
import pytest

from tests.nbexec import NOTEBOOKS
from tests.test_notebooks import shown

LESSON = NOTEBOOKS / "04_precision.ipynb"
RUN_LINE = re.compile(r"^run (\d+)/(\d+) .*\((\d+) steps\)$", re.MULTILINE)
"""The line each finished run leaves in the cell: ``run 2/3 precision=amp: ... (30 steps)``."""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lesson_runs_through_papermill_with_its_step_count_changed(tmp_path: Path) -> None:
    parameters = papermill.inspect_notebook(str(LESSON))
    assert parameters["steps"]["default"] == "30"  # so 10 is a change the runs must show
    out = tmp_path / "out.ipynb"
    papermill_cli = Path(sys.executable).parent / "papermill"
    args = [papermill_cli, LESSON, out, "-p", "steps", "10", "--cwd", tmp_path]
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]

    notebook = nbformat.read(out, as_version=4)
    [injected] = [c for c in notebook.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert "steps = 10" in injected.source
    runs = RUN_LINE.findall(shown(notebook))
    # Both sweeps (precision, then matmul precision) ran their three runs, each of 10 steps.
    assert [(i, n) for i, n, _ in runs] == [(str(i), "3") for i in (1, 2, 3)] * 2, runs
    assert {steps for *_, steps in runs} == {"10"}
