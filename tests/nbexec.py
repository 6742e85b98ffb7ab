"""Execute a notebook in a real kernel and measure it: wall time and peak memory of the kernel tree
(the kernel's RSS plus its workers' own pages, as speedlab counts a run's memory).

Used by tests/test_notebooks.py and benchmarks/notebook_memory.py.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

from speedlab.measure.procfs import unique_bytes

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
_FIGURES_MARK = "SPEEDLAB-FIGURES:"


@dataclass
class Execution:
    """What running a notebook gave: its figures (from ``probe`` code), time and memory."""

    notebook: nbformat.NotebookNode
    seconds: float
    peak_rss_bytes: int
    figures: dict = field(default_factory=dict)


class _PeakRss:
    """Peak memory of a process and all its descendants, each page once, sampled on a thread:
    forked workers share the kernel's pages, and Binder's limit counts those once."""

    def __init__(self, pid: int) -> None:
        self.peak = 0
        self._process = psutil.Process(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbexec-rss", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            try:
                used = self._process.memory_info().rss
                for child in self._process.children(recursive=True):
                    own = unique_bytes(child.pid)
                    used += child.memory_info().rss if own is None else own
                self.peak = max(self.peak, used)
            except psutil.Error:
                continue

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def execute(
    path: Path, workdir: Path, *, probe: str | None = None, timeout: int = 600
) -> Execution:
    """Run every cell of ``path`` in ``workdir``; ``probe`` (code ending in a dict expression,
    run last in the same kernel) returns the key figures to check."""
    notebook = nbformat.read(path, as_version=4)
    if probe is not None:
        code = f"import json as _json\nprint({_FIGURES_MARK!r} + _json.dumps({probe}))"
        notebook.cells.append(nbformat.v4.new_code_cell(code))
    client = NotebookClient(
        notebook,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    start = time.perf_counter()
    with client.setup_kernel(env=dict(os.environ)):
        monitor = _PeakRss(client.km.provisioner.process.pid)
        try:
            for index, cell in enumerate(notebook.cells):
                client.execute_cell(cell, index)
            client.set_widgets_metadata()  # the widgets' state, as nbconvert --execute saves it
        finally:
            peak = monitor.stop()
    seconds = time.perf_counter() - start
    figures = {}
    if probe is not None:
        text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
        figures = json.loads(text.split(_FIGURES_MARK, 1)[1])
    return Execution(notebook, seconds, peak, figures)
