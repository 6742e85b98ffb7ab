"""Shared fixtures. Every test must leave the process as it found it (STYLE: tqdm's check)."""

from __future__ import annotations

import contextlib
import importlib.util
import multiprocessing
import signal
import threading
import time
from pathlib import Path

import pytest

# The short profiled runs that the tests of the doctor share (tests/analysis, tests/run). They
# need Lightning, which the edge runs of `make test` (the torch-free part of the suite on the
# oldest and newest Python) do not install.
LIGHTNING = importlib.util.find_spec("lightning") is not None
TORCH = importlib.util.find_spec("torch") is not None
pytest_plugins = ["tests.doctor_runs"] if LIGHTNING else []


def pytest_configure(config: pytest.Config) -> None:
    """Give the test process Python's own Ctrl-C handler, as a notebook kernel has.

    A background job of a non-interactive shell (``make test &``) starts with SIGINT ignored;
    the interrupt tests send SIGINT as a user's Ctrl-C would, and would see it ignored.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that fork ranks first, gpu tests last: once CUDA is initialised in this process a
    forked rank cannot use it and Lightning refuses to fork, and on a GPU machine any test that
    trains on the default accelerator initialises it."""

    def group(item: pytest.Item) -> int:
        if item.get_closest_marker("forks"):
            return 0
        return 2 if item.get_closest_marker("gpu") else 1

    items.sort(key=group)  # stable: the order within each group is kept


@pytest.fixture(scope="session")
def lab_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One dataset cache for the whole session: the image lab is generated once."""
    return tmp_path_factory.mktemp("speedlab-cache")


@pytest.fixture
def shell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A fresh IPython shell, working in a temporary folder, with speedlab loaded."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.chdir(tmp_path)
    InteractiveShell.clear_instance()
    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # nothing left to write at the session's exit
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "speedlab")
    yield ip
    InteractiveShell.clear_instance()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, lab_cache: Path) -> None:
    """No test writes to the home folder or the repo; live views stay silent unless asked."""
    monkeypatch.setenv("SPEEDLAB_CACHE", str(lab_cache))
    monkeypatch.setenv("SPEEDLAB_STORE", str(tmp_path / "runs.sqlite"))
    from speedlab.notebook import live

    live.set_frontend("none")
    yield
    live.set_frontend(None)


@pytest.fixture
def one_compute_thread():
    """One torch thread in the main process: on 2 cores a second one spins between ops and
    slows the workers (oversubscription, a lesson of its own), which no arithmetic predicts."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _originals() -> dict[str, object]:
    if not LIGHTNING:
        return {}
    from speedlab.measure.compat import trainer_classes

    return {
        f"{cls.__module__}.{name}": cls.__dict__[name]
        for cls in trainer_classes()
        for name in ("__init__", "fit")
    }


def _end(children: list[multiprocessing.Process]) -> None:
    """End processes a test left behind, with their own children."""
    import psutil

    for child in children:
        try:
            parent = psutil.Process(child.pid)
            tree = [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
        for process in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        psutil.wait_procs(tree, timeout=10)
    multiprocessing.active_children()  # reaps them


@pytest.fixture(autouse=True)
def _no_leftovers(request: pytest.FixtureRequest):
    """Fail a test that leaves a thread, a worker process, a patch or a changed setting behind."""
    torch = importlib.import_module("torch") if TORCH else None
    threads = set(threading.enumerate())
    sigint = signal.getsignal(signal.SIGINT)
    if torch is not None:
        matmul = torch.get_float32_matmul_precision()
        torch_threads = torch.get_num_threads()
    originals = _originals()
    yield
    deadline = time.monotonic() + 15  # workers may take a while to exit on a busy machine
    while time.monotonic() < deadline:
        extra_threads = [
            t
            for t in set(threading.enumerate()) - threads
            if t.is_alive() and (not t.daemon or t.name.startswith("speedlab"))
        ]
        children = multiprocessing.active_children()
        if not extra_threads and not children:
            break
        time.sleep(0.05)
    problems = []
    if extra_threads:
        problems.append(f"threads left alive: {[t.name for t in extra_threads]}")
    if children:
        problems.append(f"processes left alive: {children}")
        _end(children)  # one leak fails one test, not every test after it
    if signal.getsignal(signal.SIGINT) != sigint:
        problems.append(f"SIGINT handler changed: {signal.getsignal(signal.SIGINT)!r}")
        signal.signal(signal.SIGINT, sigint)
    if torch is not None and torch.get_float32_matmul_precision() != matmul:
        problems.append("matmul precision changed")
        torch.set_float32_matmul_precision(matmul)
    if torch is not None and torch.get_num_threads() != torch_threads:
        problems.append("torch threads changed")
        torch.set_num_threads(torch_threads)
    if _originals() != originals:
        problems.append("Trainer.__init__/fit left patched")
    if problems:
        pytest.fail("; ".join(problems))


@pytest.fixture
def fake_cpu_flags(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Fake the CPU's flags at their source: ``fake_cpu_flags("avx512f amx_tile")`` writes a
    /proc/cpuinfo with that flags line (``None``: one without any, as on ARM) and points
    speedlab at it."""
    from speedlab.measure import numerics

    def fake(flags: str | None) -> Path:
        path = tmp_path / "cpuinfo"
        lines = ["processor\t: 0", "model name\t: Fake CPU"]
        if flags is not None:
            lines.append(f"flags\t\t: fpu sse2 avx2 {flags}".rstrip())
        path.write_text("\n".join(lines) + "\n\n")
        monkeypatch.setattr(numerics, "CPUINFO", path)
        return path

    return fake
