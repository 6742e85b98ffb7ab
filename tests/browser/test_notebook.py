"""speedlab in JupyterLab, in a real browser: the live chart of %%profile_train and the panel."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.timeout(150)]

LAB_CELL = """\
%%profile_train --workers 0,2 --time 3
import lightning.pytorch as pl
from speedlab.labs import tabular_lab

model, data = tabular_lab()
trainer = pl.Trainer(max_epochs=-1, accelerator="cpu", limit_val_batches=0, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, data)
"""

PANEL_CELL = LAB_CELL.replace("--workers 0,2 --time 3", "--panel")

LEFTOVERS = """\
import threading, psutil
print("threads", [t.name for t in threading.enumerate() if t.name.startswith("speedlab")])
print("children", len(psutil.Process().children(recursive=True)))
"""

LIVE_FRAMES = (
    "el => [...el.querySelectorAll('.speedlab-live')].map(c => [c.dataset.frame, c.dataset.step])"
)


class Notebook:
    """A notebook open in JupyterLab, driven like a user: click a cell, press Shift+Enter."""

    def __init__(self, page, artifacts: Path) -> None:
        self.page = page
        self.artifacts = artifacts

    def open(self, url: str) -> None:
        self.page.goto(url)
        self.page.locator(".jp-NotebookPanel .jp-Cell").first.wait_for()
        self.page.locator('.jp-Notebook-ExecutionIndicator[data-status="idle"]').wait_for(
            timeout=90_000
        )

    def cell(self, index: int):
        return self.page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").nth(index)

    def prompt(self, index: int) -> str:
        return self.cell(index).locator(".jp-InputPrompt").inner_text().strip()

    def run(self, index: int) -> None:
        """Run a cell: click it, press Shift+Enter, until its prompt shows [*] or a number.

        Right after the page loads the keyboard shortcut is sometimes taken before the kernel
        session is wired up and nothing runs (the prompt stays blank), so it is pressed again;
        a cell that did start shows [*] at once and is never run twice.
        """
        for _ in range(5):
            if self.page.locator(".jp-Dialog").count():
                self.fail("a dialog is in the way")
            self.cell(index).locator(".jp-InputArea-editor").click()
            self.page.keyboard.press("Shift+Enter")
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                if self.prompt(index) not in ("[ ]:", ""):
                    return
                time.sleep(0.05)
        self.fail(f"cell {index} did not start")

    def done(self, index: int) -> bool:
        return re.fullmatch(r"\[\d+\]:", self.prompt(index)) is not None

    def wait_done(self, index: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.done(index):
            if time.monotonic() > deadline:
                self.fail(f"cell {index} still running after {timeout} s")
            time.sleep(0.1)

    def output_text(self, index: int) -> str:
        return self.cell(index).locator(".jp-OutputArea").inner_text()

    def live_frames(self, index: int) -> list[tuple[str, str]]:
        """(frame, step) of every live chart in a cell's output, read at once (they are replaced)."""
        return [tuple(pair) for pair in self.cell(index).evaluate(LIVE_FRAMES)]

    def click(self, index: int, label: str) -> None:
        button = self.cell(index).locator(
            "button.jupyter-button", has_text=re.compile(f"^{label}$")
        )
        button.click()

    def screenshot(self, name: str, index: int | None = None) -> None:
        """The page (or one cell, scrolled into a viewport tall enough to hold it) as a PNG."""
        if index is None:
            self.page.screenshot(path=self.artifacts / name)
            return
        box = self.cell(index).bounding_box()
        self.page.set_viewport_size({"width": 1400, "height": int(box["height"]) + 300})
        self.cell(index).screenshot(path=self.artifacts / name)

    def fail(self, message: str) -> None:
        self.screenshot("failure.png")
        dialogs = self.page.locator(".jp-Dialog").all_inner_texts()
        pytest.fail(f"{message}; dialogs: {dialogs} (screenshot: {self.artifacts / 'failure.png'})")


@pytest.fixture
def notebook(page, artifacts: Path) -> Notebook:
    return Notebook(page, artifacts)


def test_live_chart_updates_while_the_cell_runs_then_the_table_shows(lab, notebook) -> None:
    notebook.open(lab.notebook("live.ipynb", ["%load_ext speedlab", LAB_CELL]))
    notebook.run(0)
    notebook.wait_done(0)
    notebook.run(1)
    frames: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 120
    while not notebook.done(1):
        if time.monotonic() > deadline:
            notebook.fail("the profiled cell did not finish")
        for frame, step in notebook.live_frames(1):
            if int(step) > 20 and not any(int(s) > 20 for _, s in frames):
                notebook.screenshot("live-chart-running.png")
            frames.add((frame, step))
        time.sleep(0.1)
    steps = {step for _, step in frames}
    assert len(frames) > 1 and len(steps) > 1, f"the live chart did not update: {frames}"
    out = notebook.cell(1)
    rows = out.locator("table.speedlab-table tbody tr")
    assert rows.count() == 2
    assert rows.nth(0).inner_text().startswith("baseline")
    assert rows.nth(1).inner_text().startswith("workers=2")
    assert out.locator(".speedlab-run").count() == 2  # each finished run stays on screen
    assert out.locator(".jp-OutputArea-output img").count() >= 1  # the sweep chart
    notebook.screenshot("live-chart-finished.png", index=1)


def test_panel_run_then_stop_keeps_the_row_and_the_kernel_answers(lab, notebook) -> None:
    cells = ["%load_ext speedlab", PANEL_CELL, "21 * 2", LEFTOVERS]
    notebook.open(lab.notebook("panel.ipynb", cells))
    for index in (0, 1):
        notebook.run(index)
        notebook.wait_done(index)
    panel = notebook.cell(1)
    try:
        panel.locator("button.jupyter-button", has_text="Stop").wait_for(timeout=30_000)
    except Exception:
        notebook.fail("the panel's widgets did not show")
    notebook.click(1, "Run")
    deadline = time.monotonic() + 90
    while max((int(step) for _, step in notebook.live_frames(1)), default=0) < 30:
        if time.monotonic() > deadline:
            notebook.fail("the panel's live chart never showed training")
        time.sleep(0.1)
    # the kernel answers while the panel trains: training runs in a background thread
    notebook.run(2)
    notebook.wait_done(2, timeout=20)
    assert "42" in notebook.output_text(2)
    notebook.screenshot("panel-running.png")
    notebook.click(1, "Stop")
    rows = panel.locator("table.speedlab-table tbody tr")
    rows.first.wait_for(timeout=30_000)
    assert rows.count() == 1 and "stopped" in rows.first.inner_text()
    notebook.run(3)
    notebook.wait_done(3, timeout=20)
    text = notebook.output_text(3)
    assert "threads []" in text and "children 0" in text
    notebook.screenshot("panel-stopped.png", index=1)
