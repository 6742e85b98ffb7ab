"""speedlab.run.global_state: what a run may change in the process, read and put back."""

from __future__ import annotations

import logging
import os
import signal

import torch

from speedlab.run.global_state import GlobalState


def test_everything_a_run_may_change_comes_back() -> None:
    def settings() -> dict:
        return {
            "matmul": torch.get_float32_matmul_precision(),
            "sigint": signal.getsignal(signal.SIGINT),
            "environ": dict(os.environ),
            "threads": torch.get_num_threads(),
            "benchmark": torch.backends.cudnn.benchmark,
            "deterministic": (
                torch.are_deterministic_algorithms_enabled(),
                torch.is_deterministic_algorithms_warn_only_enabled(),
            ),
            "log": logging.getLogger("lightning.pytorch").level,
        }

    before = settings()
    state = GlobalState()
    assert logging.getLogger("lightning.pytorch").level == logging.WARNING  # held back
    torch.set_float32_matmul_precision("medium")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["SPEEDLAB_TEST_VAR"] = "set in the run"
    torch.set_num_threads(max(1, before["threads"] - 1) if before["threads"] > 1 else 2)
    torch.backends.cudnn.benchmark = not before["benchmark"]
    torch.use_deterministic_algorithms(True, warn_only=True)
    assert settings() != before
    state.restore()
    assert settings() == before
