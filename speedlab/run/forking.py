"""Launching ranks from a notebook: what a fork-based strategy (``ddp_notebook``) needs.

A forked rank cannot use a CUDA context its parent initialised, and GNU OpenMP hangs in a
process forked after it ran in parallel; these checks and notes say so before training, in the
user's words. A rank that failed is named with its own error.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from speedlab.measure.ranks import start_method

CUDA_BEFORE_FORK = (
    "CUDA is already initialised in this process, and this strategy starts its ranks with "
    "{method} (as ddp_notebook does): a forked process cannot use the CUDA context of its "
    "parent, so every rank would fail. An earlier cell touched the GPU (a tensor or model moved "
    "to 'cuda', a torch.cuda.* call). Restart the kernel and run the training cell before "
    "anything uses the GPU, leaving the move to the GPU to the Trainer (it does it inside each "
    "rank), or run the training as a script with strategy='ddp'."
)

FORKED_RANK_THREADS = (
    "Each forked rank trains with 1 torch thread: GNU OpenMP (the thread pool torch computes "
    "with on Linux) hangs in a process forked after it has run in parallel (GCC bug 60035), as "
    "this process may have "
    "in an earlier cell. On this machine a rank could otherwise use {threads}; to give each rank "
    "several threads, run the training as a script with strategy='ddp'."
)


def forked_rank_threads_note(trainer: Any) -> str | None:
    """In the notebook process: the note that forked ranks will train with one thread, when a
    rank would otherwise have used more (Lightning gives each rank OMP_NUM_THREADS, or the
    cores divided among the ranks)."""
    if start_method(trainer) != "fork":
        return None
    ranks = max(1, int(getattr(trainer.strategy, "num_processes", 1)))
    threads = int(os.environ.get("OMP_NUM_THREADS") or max(1, (os.cpu_count() or 1) // ranks))
    return FORKED_RANK_THREADS.format(threads=threads) if threads > 1 else None


class CudaBeforeForkError(RuntimeError):
    """A fork-based strategy was about to start its ranks with ``start_method`` after CUDA was
    initialised in this process."""

    def __init__(self, start_method: str) -> None:
        self.start_method = start_method
        super().__init__(CUDA_BEFORE_FORK.format(method=start_method))

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.start_method,)


def check_fork(trainer: Any, *, cuda_initialized: Callable[[], bool] | None = None) -> None:
    """Refuse a fork-based launch (``ddp_notebook``) in a process that has initialised CUDA.

    Call it in the notebook process before ``trainer.fit``: the message says what went wrong and
    what to do, where Lightning's own check stops at "can't create new processes".
    ``cuda_initialized`` defaults to ``torch.cuda.is_initialized``.
    """
    method = start_method(trainer)
    if method not in ("fork", "forkserver"):
        return
    if cuda_initialized is None:
        import torch

        cuda_initialized = torch.cuda.is_initialized
    if cuda_initialized():
        raise CudaBeforeForkError(method)


def describe_rank_failure(err: BaseException) -> str | None:
    """``rank 1 failed: ZeroDivisionError: ...`` for a rank process that failed, else None."""
    from torch.multiprocessing.spawn import ProcessException, ProcessRaisedException

    if not isinstance(err, ProcessException):
        return None
    text = str(err).strip()
    if isinstance(err, ProcessRaisedException):  # the message ends with the rank's traceback
        text = text.splitlines()[-1].strip()
    return f"rank {err.error_index} failed: {text}"
