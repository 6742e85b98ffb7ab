"""What libraries print and display during a panel run, kept in the panel, collapsed.

A panel run trains in a background thread, and what Lightning writes there (its warnings, its
progress bar) would land under whichever cell the front end links it to: under the panel's
cell in nbclassic, nowhere in JupyterLab. Two mechanisms of Jupyter's own put it in the panel
instead. ipykernel (7 and later) sends a thread's output as a reply to the request that thread
names (``set_thread_parent``), and an ``ipywidgets.Output`` whose ``msg_id`` is that request
takes every such reply, in JupyterLab, Notebook 7 and nbclassic alike (``with output:`` works
the same way; front ends apply the claim before they show the messages sent after it). So while
a run lasts, its thread names the request that showed the section, and the section claims it.
Output widgets of the library's own (rich's live display) nest inside, as ``with output:``
blocks do. ipykernel 7.0 to 7.3 (the last on Python 3.10) keep the same per-thread parent
without the method; outside a kernel nothing is redirected.

The widget updates of such a thread reply to the request that started it (``replies_to``), not
to a cell run meanwhile.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import ipywidgets as widgets

TITLE = "Lightning's output during the last run (warnings, progress bar)"


def current_request() -> dict[str, Any] | None:
    """The kernel request being handled now (a cell's execute request), if in a kernel."""
    from IPython import get_ipython

    get_parent = getattr(get_ipython(), "get_parent", None)
    request = get_parent() if get_parent is not None else None
    return request if request and request.get("header", {}).get("msg_id") else None


@contextmanager
def replies_to(request: dict[str, Any] | None) -> Iterator[None]:
    """Send the widget (comm) messages of the calling thread as replies to ``request``.

    A comm message replies to the request its thread names, and where the thread names none,
    to the last request the kernel handled. A training thread's widget updates would then reply
    to whatever cell the learner runs meanwhile: JupyterLab and Notebook 7 hand them to that
    cell's execution, and the kernel sends what the page says to those widgets next to that
    cell's shell instead of the widgets' subshell. ipykernel 7.4 keeps the request per thread
    (the kernel's ContextVar ``_shell_parent``, which ``get_parent`` reads); a kernel without
    it is left as it is.
    """
    from IPython import get_ipython

    variable = getattr(getattr(get_ipython(), "kernel", None), "_shell_parent", None)
    if request is None or not isinstance(variable, ContextVar):
        yield
        return
    token = variable.set(request)
    try:
        yield
    finally:
        variable.reset(token)


class ThreadOutput:
    """A collapsed section that holds a thread's output while ``capture()`` lasts.

    Args:
        title: the section's title.
    """

    def __init__(self, title: str = TITLE) -> None:
        self.output = widgets.Output()
        self.widget = widgets.Accordion([self.output], titles=(title,), selected_index=None)
        self.request: dict[str, Any] | None = None

    def attach(self, request: dict[str, Any] | None) -> None:
        """Send captured output as replies to ``request``, the one that showed the section (its
        cell's output area listens for them while the page is open)."""
        self.request = request

    @contextmanager
    def capture(self) -> Iterator[None]:
        """Send what the calling thread prints and displays into the section (emptied first)."""
        from IPython import get_ipython

        reset = None if self.request is None else _set_thread_parent(get_ipython(), self.request)
        if reset is None:
            yield
            return
        self.output.outputs = ()
        self.output.msg_id = self.request["header"]["msg_id"]
        try:
            yield
        finally:
            sys.stdout.flush()  # sent while the section still claims them
            sys.stderr.flush()
            reset()
            self.output.msg_id = ""


def _set_thread_parent(shell: Any, request: dict[str, Any]) -> Callable[[], None] | None:
    """Send what the calling thread prints and displays as replies to ``request``; returns
    the undo, or None where the kernel cannot (no kernel, or ipykernel before 7).

    ipykernel 7.4 and later have ``set_thread_parent``. 7.0 to 7.3 keep the same per-thread
    parent, in the ContextVar ``_parent_header`` of the shell, its display publisher and the
    output streams, which is what 7.4's method sets; a thread starts with a context of its own,
    so setting them there leaves the other threads' output where it was.
    """
    set_thread_parent = getattr(shell, "set_thread_parent", None)
    if set_thread_parent is not None:
        tokens = set_thread_parent(request)
        return lambda: shell.reset_thread_parent(tokens)
    from jupyter_client.session import extract_header

    header = extract_header(request)
    parents = [(shell, request), (getattr(shell, "display_pub", None), header)]
    parents += [(sys.stdout, header), (sys.stderr, header)]
    variables = [(getattr(obj, "_parent_header", None), value) for obj, value in parents]
    tokens = [(var, var.set(value)) for var, value in variables if isinstance(var, ContextVar)]
    if not tokens:
        return None

    def reset() -> None:
        for var, token in reversed(tokens):
            var.reset(token)

    return reset
