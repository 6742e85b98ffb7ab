"""The CUDA clock: a step's batch_time from CUDA events, read once the GPU has passed them.

The host queues a step's kernels and runs ahead, so the host's clock says when work was queued,
not done. Events recorded at the step's edges are stamped by the GPU itself; they are read a few
steps later (``query``), or after one synchronisation at the end (``wait``), never with a
synchronisation per step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any


class CudaTimer:
    """batch_time from CUDA events, resolved lazily once the GPU has passed them.

    ``event`` and ``synchronize`` default to torch.cuda's; another device with the same event
    semantics (recorded in its queue, stamped when the device reaches them) can stand in.
    """

    def __init__(
        self,
        event: Callable[[], Any] | None = None,
        synchronize: Callable[[], None] | None = None,
    ) -> None:
        import torch

        self._event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self._synchronize = synchronize or torch.cuda.synchronize
        self._pool: list[Any] = []
        self._pending: deque[tuple[int, Any, Any]] = deque()
        self._start: Any = None

    def _take(self) -> Any:
        return self._pool.pop() if self._pool else self._event()

    def start(self) -> None:
        self._start = self._take()
        self._start.record()

    def stop(self, index: int) -> None:
        end = self._take()
        end.record()
        self._pending.append((index, self._start, end))

    def resolve(self, batch_times: list[float], *, wait: bool = False) -> None:
        """Write finished spans into ``batch_times``; with ``wait``, synchronize once first.

        A span past the end of ``batch_times`` belongs to a step that raised before it was
        recorded: it is dropped, so the step's own error is what the user sees.
        """
        if wait and self._pending:
            self._synchronize()
        while self._pending and (wait or self._pending[0][2].query()):
            index, start, end = self._pending.popleft()
            if index < len(batch_times):
                batch_times[index] = start.elapsed_time(end) / 1e3
            self._pool += (start, end)
