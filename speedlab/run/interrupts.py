"""Ctrl-C held off while a measured run is assembled and stored, so that it lands first.

An interrupt between the end of training and the run's row in the store would lose a run that
was measured whole: it takes effect once the work in hand is done instead.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType


@dataclass
class Held:
    """Whether an interrupt arrived while held (``held_interrupts``)."""

    interrupted: bool = False


@contextmanager
def held_interrupts() -> Iterator[Held]:
    """Hold SIGINT for the block; ``interrupted`` says whether one came. Off the main thread
    (the panel's runs) no signal reaches the block, and nothing changes."""
    held = Held()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def note(signum: int, frame: FrameType | None) -> None:
        held.interrupted = True

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield held
    finally:
        signal.signal(signal.SIGINT, previous)
