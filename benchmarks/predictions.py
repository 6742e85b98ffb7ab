"""Benchmark: speedlab's predictions against what the lessons' sweeps measure.

Runs every code cell of the lesson notebooks in order, in one IPython shell in this process
(their output hidden), and after each ``%%profile_train`` cell prints, for each run after the
baseline, speedlab's prediction (made before the run) beside the measured speedup and verdict,
and whether the measurement fell within ``FAR_OFF`` (25%) of the predicted range
(``prediction_off``: a run within noise of its baseline may count as 1.0x). A knob the
baseline's split cannot predict (precision, compile) shows why instead of a figure.

Usage::

    python benchmarks/predictions.py [notebooks/01_where_the_time_goes.ipynb ...]

Without arguments: lessons 01 to 05. Exits with 0; the counts at the end say how many
predictions held.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

from IPython.core.interactiveshell import InteractiveShell

from speedlab.analysis.predict import prediction_off
from speedlab.notebook import session
from speedlab.results.prediction import FAR_OFF
from speedlab.results.sweep import SweepResult

LESSONS = sorted(Path(__file__).resolve().parents[1].glob("notebooks/0[1-5]_*.ipynb"))


def code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def lines(sweep: SweepResult) -> list[str]:
    """One line per run after the baseline: predicted, measured, and whether it held."""
    base, out = sweep.baseline, []
    for run in sweep.runs[1:]:
        p = run.prediction
        measured = "failed" if run.speedup is None else f"{run.speedup:.2f}x"
        verdict = run.comparison.verdict if run.comparison is not None else "-"
        if p is None or not p.made:
            held = f"no prediction: {p.reason if p else 'none made'}"
        else:
            off = prediction_off(run)
            held = "held" if off is not None and off <= FAR_OFF else f"OFF by {off:.0%}"
        shown = p.text() if p is not None else "-"
        out.append(
            f"  {run.label(base):<28} predicted {shown:<14} measured {measured:<7} "
            f"({verdict}): {held}"
        )
    return out


def main(paths: list[str]) -> int:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "speedlab")
    counts = {"held": 0, "off": 0, "none": 0}
    for notebook in [Path(p) for p in paths] or LESSONS:
        print(f"== {notebook.name}")
        for source in code_cells(notebook):
            session.last = None
            with (
                contextlib.redirect_stdout(io.StringIO()),
                contextlib.redirect_stderr(io.StringIO()),
            ):
                shell.run_cell(source.replace("%%profile_train", "%%profile_train --no-live", 1))
            sweep = session.last if source.startswith("%%profile_train") else None
            if sweep is None or len(sweep.runs) < 2:
                continue
            print(f" {source.splitlines()[0]}")
            for line in lines(sweep):
                print(line)
                key = "held" if line.endswith("held") else "off" if " OFF by " in line else "none"
                counts[key] += 1
    print(
        f"predictions: {counts['held']} held, {counts['off']} off by more than {FAR_OFF:.0%}, "
        f"{counts['none']} not made (the split cannot predict the knob)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
