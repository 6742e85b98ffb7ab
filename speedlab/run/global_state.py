"""The process-wide settings a run may change, read before it and put back after it: what the
knobs set (matmul precision), what a Trainer sets (cuDNN's benchmark, deterministic algorithms,
the environment), the SIGINT handler Lightning replaces during a fit, torch's threads and
Lightning's log levels."""

from __future__ import annotations

import logging
import os
import signal
import threading
from typing import Any

from speedlab.measure.numerics import MatmulSettings


def restore_sigint(handler: Any) -> None:
    """Put the SIGINT handler back, from the main thread only.

    Only the main thread may set it, and Lightning changes it only there: a run in a background
    thread (the panel's) leaves it alone.
    """
    if handler is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, handler)


_QUIET_LOGGERS = ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric")


class GlobalState:
    """Snapshot of the process-wide settings a run may change: the knobs' (matmul precision)
    and the Trainer's (its ``benchmark`` and ``deterministic`` set torch's cuDNN benchmark and
    deterministic algorithms, and the environment).

    Lightning's info messages ("GPU available ...") are held back during runs: a sweep would
    repeat them for every run, between the live lines. Everything is read before anything is
    changed, so a snapshot that fails changes nothing.
    """

    def __init__(self) -> None:
        import torch

        self.matmul = MatmulSettings()
        self.sigint = signal.getsignal(signal.SIGINT)
        self.environ = dict(os.environ)
        self.threads = torch.get_num_threads()
        self.cudnn_benchmark = torch.backends.cudnn.benchmark
        self.deterministic = (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
        )
        self.log_levels = {name: logging.getLogger(name).level for name in _QUIET_LOGGERS}
        for name in _QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)

    def restore(self) -> None:
        import torch

        self.matmul.restore()
        restore_sigint(self.sigint)
        for key in set(os.environ) - set(self.environ):
            del os.environ[key]
        os.environ.update(self.environ)
        if torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        deterministic, warn_only = self.deterministic
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        for name, level in self.log_levels.items():
            logging.getLogger(name).setLevel(level)
