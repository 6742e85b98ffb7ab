"""user_traceback: an error from the cell shows the user's frames and the libraries', not the
frames of speedlab's wrappers it passed through (the magic's test shows it on a real fit)."""

from __future__ import annotations

import traceback
from pathlib import Path
from types import TracebackType

import speedlab
from speedlab.run.tracebacks import user_traceback

PACKAGE = Path(speedlab.__file__).parent
CELL = Path("/home/student/cell.py")
LIGHTNING = Path("/venv/lib/python3.11/site-packages/lightning/pytorch/loops/loop.py")


def _raised_through(*files: Path) -> BaseException:
    """An error raised in the last of ``files``, called through a function in each of the
    others in order: real frames, compiled with those files' names."""
    inner = None
    for file in reversed(files):
        namespace = {"inner": inner}
        body = "inner()" if inner is not None else "raise ValueError('bug')"
        exec(compile(f"def call():\n    {body}\n", str(file), "exec"), namespace)
        inner = namespace["call"]
    try:
        inner()
    except ValueError as error:
        return error
    raise AssertionError("nothing was raised")


def _files(tb: TracebackType | None) -> list[str]:
    return [frame.filename for frame in traceback.extract_tb(tb)][1:]  # less this test's frame


def test_speedlabs_wrappers_are_left_out_wherever_they_sit() -> None:
    error = _raised_through(
        PACKAGE / "run" / "intercept.py", CELL, LIGHTNING, PACKAGE / "measure" / "probe.py", CELL
    )
    assert _files(user_traceback(error.__traceback__)) == [str(CELL), str(LIGHTNING), str(CELL)]
    assert len(_files(error.__traceback__)) == 5  # the error's own traceback is left whole


def test_an_error_raised_inside_speedlab_keeps_its_frames_from_the_last_of_the_users() -> None:
    knobs, store = PACKAGE / "results" / "knobs.py", PACKAGE / "results" / "store.py"
    error = _raised_through(PACKAGE / "run" / "intercept.py", CELL, knobs, store)
    assert _files(user_traceback(error.__traceback__)) == [str(CELL), str(knobs), str(store)]


def test_a_lessons_model_is_the_users_code() -> None:
    lab = PACKAGE / "labs" / "known_cost.py"
    error = _raised_through(LIGHTNING, PACKAGE / "measure" / "probe.py", lab, CELL)
    assert _files(user_traceback(error.__traceback__)) == [str(LIGHTNING), str(lab), str(CELL)]
