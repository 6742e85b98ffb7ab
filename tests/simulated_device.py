"""A simulated asynchronous device: work queued by the host runs in order on a background thread,
and an event is stamped when the queue reaches it, as a CUDA stream does.

It lets the device-timeline logic run honestly on a CPU: the host's clock says when work was
queued, the events when it was done. It never replaces the check on a real GPU.
"""

from __future__ import annotations

import queue
import threading
import time


class SimulatedEvent:
    """``torch.cuda.Event``'s timing part: record, query, elapsed_time (milliseconds)."""

    def __init__(self, device: SimulatedDevice) -> None:
        self._device = device
        self.stamp: float | None = None

    def record(self) -> None:
        self.stamp = None
        self._device.queue.put(self)

    def query(self) -> bool:
        return self.stamp is not None

    def elapsed_time(self, end: SimulatedEvent) -> float:
        if self.stamp is None or end.stamp is None:
            raise RuntimeError("an event was not reached yet: synchronize first")
        return (end.stamp - self.stamp) * 1e3


class SimulatedDevice:
    """Runs ``launch``ed work (seconds of sleep) in order; ``synchronize`` waits for all of it."""

    def __init__(self) -> None:
        self.queue: queue.Queue[float | SimulatedEvent] = queue.Queue()
        threading.Thread(target=self._run, name="simulated-device", daemon=True).start()

    def launch(self, seconds: float) -> None:
        self.queue.put(seconds)

    def event(self) -> SimulatedEvent:
        return SimulatedEvent(self)

    def synchronize(self) -> None:
        self.queue.join()

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if isinstance(item, SimulatedEvent):
                item.stamp = time.perf_counter()
            else:
                time.sleep(item)
            self.queue.task_done()
