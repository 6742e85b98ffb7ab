"""`make run`, the README's first command: JupyterLab on the lessons (as root too), the address
to open printed, the lab page served; stopped, it leaves no process behind.

It runs the Makefile's own `run` target on this test's venv (already set up: `-o` keeps make
from installing it again), on a free port and without a browser.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import suppress
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
VENV = Path(sys.prefix)
JUPYTER = VENV / "bin" / "jupyter"

pytestmark = pytest.mark.skipif(
    shutil.which("make") is None or not JUPYTER.exists() or not (REPO / "Makefile").exists(),
    reason="needs make and JupyterLab in this venv (the edge venvs have no JupyterLab)",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def read_until(process: subprocess.Popen, pattern: re.Pattern, timeout_s: float) -> tuple:
    """The output so far and the first match of ``pattern`` in it (None when the process ended
    or the time ran out first)."""
    output = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0:
            if not selector.select(left):
                continue
            chunk = os.read(process.stdout.fileno(), 65536)
            if not chunk:
                break
            output += chunk
            if found := pattern.search(output.decode(errors="replace")):
                return output.decode(errors="replace"), found
    return output.decode(errors="replace"), None


def fetch(url: str, timeout_s: float) -> str:
    """The page at ``url``. The server may print its address a moment before it listens: a
    refused connection is tried again until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as response:
                assert response.status == 200
                return response.read().decode()
        except urllib.error.URLError as err:
            if not isinstance(err.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def group_members(group: int) -> list[psutil.Process]:
    """The processes of process group ``group``."""
    found = []
    for proc in psutil.process_iter():
        with suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(proc.pid) == group:
                found.append(proc)
    return found


def stop(process: subprocess.Popen) -> list[psutil.Process]:
    """Stop make and JupyterLab (one process group) with SIGTERM, as closing a terminal does;
    returns those of the group still alive 30 s later, which it kills."""
    members = group_members(process.pid)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)
    _, alive = psutil.wait_procs(members, timeout=30)
    for proc in alive:
        proc.kill()
    return alive


def test_make_run_serves_the_lab_page_and_prints_its_address(tmp_path: Path) -> None:
    port = free_port()
    command = [
        "make",
        "--no-print-directory",
        "-o",
        f"{VENV}/.installed",
        "run",
        f"VENV={VENV}",
        f"LAB_ARGS=--no-browser --port={port} --ServerApp.port_retries=0",
    ]
    env = {
        **os.environ,
        # JupyterLab's runtime files and workspaces go to this test's folder, not the home's.
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, stopped as one
    )
    try:
        # The whole line: the token is printed in full.
        address = re.compile(rf"(http://(?:localhost|127\.0\.0\.1):{port}/lab\?token=\w+)\s")
        output, found = read_until(process, address, timeout_s=120)
        assert found, f"no address to open printed; make run said:\n{output}"
        assert "Running as root is not recommended" not in output
        page = fetch(found[1], timeout_s=60)
        assert "<title>JupyterLab</title>" in page
    finally:
        left = stop(process)
        process.stdout.close()
    assert left == [], f"processes left behind by make run: {left}"
    with socket.socket() as sock, pytest.raises(OSError):
        sock.connect(("127.0.0.1", port))  # the server is gone, its port closed


def test_make_run_adds_allow_root_only_for_root() -> None:
    shown = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", f"{VENV}/.installed", "run", f"VENV={VENV}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"{JUPYTER} lab notebooks/" in shown
    assert ("--allow-root" in shown) == (os.geteuid() == 0)
