"""ThreadOutput: in a real kernel, a thread's output is sent as replies to the request that showed
the section, and the section claims that request; front ends route by exactly these two (the
browser tests check that they do). replies_to: a thread's widget messages reply to the request
it names, not to a cell run meanwhile."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import pytest

from speedlab.notebook.capture import ThreadOutput

# Two threads update a widget each until told to stop: one names the request of the cell that
# started them, the other names none (a widget type each, to tell their messages apart).
UPDATERS = """\
import threading
from contextvars import ContextVar
import ipywidgets as widgets
from speedlab.notebook.capture import current_request, replies_to

kernel_parent = getattr(get_ipython().kernel, "_shell_parent", None)
print("per-thread kernel parent:", isinstance(kernel_parent, ContextVar))
stop = threading.Event()

def update(widget, request):
    with replies_to(request):
        while not stop.wait(0.02):
            widget.value += 1

started_by = current_request()
threading.Thread(target=update, args=(widgets.IntText(), started_by)).start()
threading.Thread(target=update, args=(widgets.FloatText(), None)).start()
"""
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


def execute(client, code: str, *, then_s: float = 0.5) -> tuple[str, list[dict]]:
    """Run ``code``; its request's id and every iopub message up to its end, and those that
    follow it until none has come for ``then_s`` (a thread's last output may follow the cell's
    end; 0: none).

    It returns once the request's reply has come on the shell channel too. ipykernel 7 sends
    shell replies raw on the socket it reads requests from through a stream, and a request
    that lands while a reply is being sent is not read until something else wakes that stream
    (ipython/ipykernel#1554). That fits what CI saw once: the kernel never ran the request
    sent right after an idle status, while the widget threads' messages kept this loop going
    for 300 s.
    """
    request = client.execute(code)
    deadline = time.monotonic() + 60
    messages = []
    while True:
        assert time.monotonic() < deadline, f"the kernel did not finish {code!r} in 60 s"
        message = client.get_iopub_msg(timeout=60)
        messages.append(message)
        if (
            message["parent_header"].get("msg_id") == request
            and message["msg_type"] == "status"
            and message["content"]["execution_state"] == "idle"
        ):
            break
    while client.get_shell_msg(timeout=60)["parent_header"].get("msg_id") != request:
        pass
    while then_s:
        try:
            messages.append(client.get_iopub_msg(timeout=then_s))
        except queue.Empty:
            break
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


def updates_by_model(messages: list[dict]) -> dict[str, list[str]]:
    """For each widget model opened in ``messages``, the parents of its value updates."""
    models = {
        m["content"]["comm_id"]: m["content"]["data"]["state"]["_model_name"]
        for m in messages
        if m["msg_type"] == "comm_open"
    }
    parents: dict[str, list[str]] = {name: [] for name in models.values()}
    for m in messages:
        if m["msg_type"] == "comm_msg" and "value" in m["content"]["data"].get("state", {}):
            parents[models[m["content"]["comm_id"]]].append(m["parent_header"].get("msg_id"))
    return parents


def test_a_threads_widget_messages_reply_to_the_request_it_names(kernel) -> None:
    started, first = execute(kernel, UPDATERS, then_s=0)
    meanwhile, second = execute(kernel, "import time\ntime.sleep(0.5)\n21 * 2", then_s=0)
    _, last = execute(kernel, "stop.set()")
    if "per-thread kernel parent: True" not in texts(first, started):
        pytest.skip("this ipykernel keeps one kernel parent for all threads (before 7.4)")
    parents = updates_by_model(first + second + last)
    named, unnamed = parents["IntTextModel"], parents["FloatTextModel"]
    assert len(named) > 5 and set(named) == {started}
    # Without a name, updates sent while the other cell ran replied to it: what is fixed here.
    assert meanwhile in unnamed


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
