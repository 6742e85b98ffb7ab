"""ThreadOutput: a background thread's output goes into a collapsed section, in a real kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from speedlab.notebook.capture import ThreadOutput
from tests.nbexec import execute

CELL = """\
import sys, threading, warnings
from IPython.display import display
from speedlab.notebook.capture import ThreadOutput, current_request

section = ThreadOutput("library output")
section.attach(current_request())
display(section.widget)

def work():
    with section.capture():
        print("printed in the run")
        warnings.warn("a library's warning")
        display("displayed in the run")  # as tqdm shows its bar
    print("printed after the run")

thread = threading.Thread(target=work)
thread.start()
thread.join()
print("printed by the cell")
"""


def _widget_state(notebook: nbformat.NotebookNode) -> dict:
    return notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]


@pytest.mark.slow
def test_a_threads_output_goes_into_the_section_and_only_while_it_captures(
    tmp_path: Path,
) -> None:
    path = tmp_path / "capture.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)]), path)
    notebook = execute(path, tmp_path, timeout=60).notebook
    outputs = notebook.cells[0].outputs
    under_cell = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "printed by the cell" in under_cell and "printed after the run" in under_cell
    assert "in the run" not in under_cell and "warning" not in under_cell
    assert not [o for o in outputs if "displayed in the run" in str(o.get("data", ""))]

    state = _widget_state(notebook)
    (section,) = [m["state"] for m in state.values() if m["state"]["_model_name"] == "OutputModel"]
    captured = [o.get("text") or o["data"]["text/plain"] for o in section["outputs"]]
    assert "printed in the run\n" in captured[0]
    assert "a library's warning" in "".join(captured)
    assert "'displayed in the run'" in captured
    assert section["msg_id"] == ""  # it claims nothing once the run is over


def test_without_a_kernel_nothing_is_redirected(capsys: pytest.CaptureFixture[str]) -> None:
    section = ThreadOutput()
    section.attach({"header": {"msg_id": "m1"}})
    with section.capture():
        print("plain")
    assert capsys.readouterr().out == "plain\n"
    assert section.output.outputs == () and section.output.msg_id == ""
    assert section.widget.selected_index is None  # collapsed
