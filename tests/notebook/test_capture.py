"""ThreadOutput: in a real kernel, a thread's output is sent as replies to the request that showed
the section, and the section claims that request; front ends route by exactly these two (the
browser tests check that they do)."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import pytest

from speedlab.notebook.capture import ThreadOutput

SHOW = """\
import threading, warnings
from IPython.display import display
from speedlab.notebook.capture import ThreadOutput, current_request

section = ThreadOutput("library output")
display(section.widget)
section.attach(current_request())
"""

RUN = """\
from tqdm.notebook import tqdm

def work():
    with section.capture():
        print("printed in the run")
        warnings.warn("a library's warning")
        tqdm(total=3).close()  # a progress bar displays itself
    print("printed after the run")

thread = threading.Thread(target=work)
thread.start()
thread.join()
print("printed by the cell")
"""


@pytest.fixture
def kernel() -> Iterator[object]:
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    yield client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def execute(client, code: str) -> tuple[str, list[dict]]:
    """Run ``code``; its request's id and every iopub message up to its end (and just after)."""
    request = client.execute(code)
    messages = []
    while True:
        message = client.get_iopub_msg(timeout=60)
        messages.append(message)
        if (
            message["parent_header"].get("msg_id") == request
            and message["msg_type"] == "status"
            and message["content"]["execution_state"] == "idle"
        ):
            break
    while True:  # a thread's last output may follow the cell's end
        try:
            messages.append(client.get_iopub_msg(timeout=0.5))
        except queue.Empty:
            return request, messages


def texts(messages: list[dict], parent: str) -> str:
    """What the messages replying to ``parent`` print and display, as text."""
    out = []
    for message in messages:
        if message["parent_header"].get("msg_id") != parent:
            continue
        content = message["content"]
        if message["msg_type"] == "stream":
            out.append(content["text"])
        elif message["msg_type"] == "display_data":
            out.append(content["data"]["text/plain"])
    return "".join(out)


def claims(messages: list[dict]) -> list[str]:
    """The ``msg_id`` values the section's Output widget took, in order."""
    return [
        m["content"]["data"]["state"]["msg_id"]
        for m in messages
        if m["msg_type"] == "comm_msg" and "msg_id" in m["content"]["data"].get("state", {})
    ]


@pytest.mark.slow
def test_a_threads_output_replies_to_the_request_that_showed_the_section(kernel) -> None:
    shown, first = execute(kernel, SHOW)
    ran, second = execute(kernel, RUN)
    assert claims(first) == []
    captured = texts(second, shown)
    assert "printed in the run" in captured and "a library's warning" in captured
    assert "0/3" in captured  # the bar
    rest = texts(second, ran)
    assert "printed after the run" in rest and "printed by the cell" in rest
    assert "in the run" not in rest
    assert claims(second) == [shown, ""]  # claimed while the thread captures, then released


def test_without_a_kernel_nothing_is_redirected(capsys: pytest.CaptureFixture[str]) -> None:
    section = ThreadOutput()
    section.attach({"header": {"msg_id": "m1"}})
    with section.capture():
        print("plain")
    assert capsys.readouterr().out == "plain\n"
    assert section.output.outputs == () and section.output.msg_id == ""
    assert section.widget.selected_index is None  # collapsed
