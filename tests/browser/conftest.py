"""Each Jupyter front end on a free localhost port and headless Chromium driving it (Playwright).

The tests of this folder run once per front end a learner may bring: JupyterLab, Notebook 7 and
nbclassic (the classic Notebook that departments' JupyterHubs still serve). Each server is the
project's own (``.venv/bin/jupyter lab``, ``notebook``, ``nbclassic``) with a token, a temporary
notebook folder and private config/settings/run-store folders, so nothing the tests do reaches
the user's Jupyter set-up. Chromium is Debian's ``/usr/bin/chromium``; Playwright only drives it
(no ``playwright install``). Screenshots go to ``test-artifacts/``, named by front end.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# JupyterLab's news and update checks would fetch from the internet and pop up toasts.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false",
        "checkForUpdates": False,
    }
}

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)",
)


@dataclass(frozen=True)
class Frontend:
    """A Jupyter front end: the command that serves it and the page's names for its parts.

    ``cell`` finds the notebook's code cells; inside a cell, ``editor`` is where to click to type,
    ``prompt`` shows ``[ ]``, ``[*]`` or ``[3]``, ``outputs`` is the cell's output area and
    ``output`` one output in it (not one nested in a widget). ``idle`` shows once the kernel is
    ready; ``dialog`` is a modal dialog in the way.
    """

    name: str
    cell: str
    editor: str
    prompt: str
    outputs: str
    output: str
    idle: str
    dialog: str

    def notebook_url(self, server: Server, name: str) -> str:
        """Where the front end opens the notebook ``name`` (JupyterLab: alone, in a fresh
        workspace)."""
        if self.name == "lab":
            path = f"lab/workspaces/{Path(name).stem}/tree/{name}?reset&"
        else:
            path = f"{'nbclassic/' if self.name == 'nbclassic' else ''}notebooks/{name}?"
        return f"{server.url}/{path}token={server.token}"


_LAB_PARTS = {
    "cell": ".jp-Notebook .jp-Cell",
    "editor": ".jp-InputArea-editor",
    "prompt": ".jp-InputPrompt",
    "outputs": ".jp-Cell-outputArea",
    "output": ".jp-Cell-outputArea > .jp-OutputArea-child",
    "idle": '.jp-Notebook-ExecutionIndicator[data-status="idle"]',
    "dialog": ".jp-Dialog",
}
FRONTENDS = [
    Frontend("lab", **_LAB_PARTS),
    Frontend("notebook", **_LAB_PARTS),  # Notebook 7 is built from JupyterLab's parts
    Frontend(
        "nbclassic",
        cell=".cell.code_cell",
        editor=".CodeMirror",
        prompt=".input_prompt",
        # An Output widget's own output area has these classes too: only the cell's own count.
        outputs=":scope > .output_wrapper",
        output=":scope > .output_wrapper > .output > .output_area",
        idle="#kernel_indicator_icon.kernel_idle_icon",
        dialog=".modal.in",
    ),
]


@dataclass(frozen=True)
class Server:
    """A running Jupyter server: where it listens, where its notebooks live, its front end."""

    url: str
    token: str
    root: Path
    frontend: Frontend

    def notebook(self, name: str, cells: list[str]) -> str:
        """Write a notebook of code cells; the URL that opens it in this front end."""
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nbformat.write(nb, self.root / name)
        return self.frontend.notebook_url(self, name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_until_up(url: str, server: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"The Jupyter server exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"The Jupyter server did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module", params=FRONTENDS, ids=[f.name for f in FRONTENDS])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A Jupyter server for each front end in turn; the tests of a module run against each."""
    frontend: Frontend = request.param
    home = tmp_path_factory.mktemp(f"jupyter-{frontend.name}")
    root = home / "notebooks"
    root.mkdir()
    settings = home / "lab-settings"
    for name, values in LAB_SETTINGS.items():
        path = settings / name.replace(":", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(home / "config"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
        "SPEEDLAB_STORE": str(home / "runs.sqlite"),
        "SPEEDLAB_CACHE": str(home / "cache"),
    }
    port, token = _free_port(), secrets.token_hex(16)
    log = home / "jupyter.log"
    command = [
        str(Path(sys.executable).parent / "jupyter"),
        frontend.name,
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
    ]
    if frontend.name == "lab":
        command.append("--LabApp.news_url=")
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers and CI often run as root
        command.append("--allow-root")
    with log.open("w") as out:
        server = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_until_up(f"{url}/api/status?token={token}", server, log)
        yield Server(url, token, root, frontend)
    finally:
        # The server's own session: the server and the kernels it started, nothing else.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


@pytest.fixture(autouse=True)
def _no_leftovers() -> None:
    """Replaces the suite's leftover check here: speedlab runs in the kernel's process, not in
    pytest's (the panel test checks the kernel for leftovers), and Playwright's own event-loop
    threads in pytest's process live as long as the browser."""
