"""The user's traceback: an error from the cell shown as it would be without speedlab.

A profiled fit passes through speedlab's wrappers (the intercepted ``Trainer.fit``, the probe's
taps around the optimizer step); their frames sit between the user's and Lightning's in every
traceback from the cell and would send a reader to speedlab for the user's bug.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from types import TracebackType

_PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: Lesson models and data the user trains: their frames are the cell's code, not speedlab's.
_USER_FACING = (_PACKAGE_DIR / "labs",)


def _ours(tb: TracebackType) -> bool:
    path = Path(tb.tb_frame.f_code.co_filename)
    return path.is_relative_to(_PACKAGE_DIR) and not any(
        path.is_relative_to(folder) for folder in _USER_FACING
    )


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """The traceback without speedlab's frames that the error only passed through. Frames of
    speedlab's after the last frame of the user's (or a library's) stay: there the error was
    raised inside speedlab, and where matters. A new chain; the error's own is left as it is."""
    frames = []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    last_theirs = max((i for i, frame in enumerate(frames) if not _ours(frame)), default=-1)
    kept = [f for i, f in enumerate(frames) if i > last_theirs or not _ours(f)]
    chain = None
    for frame in reversed(kept):
        chain = TracebackType(chain, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return chain


def print_user_traceback(err: BaseException) -> None:
    """Print the error to stderr with the user's traceback."""
    traceback.print_exception(type(err), err, user_traceback(err.__traceback__), file=sys.stderr)
