"""speedlab.analysis.traps: worker set-ups that fail in a notebook, or work only by accident."""

from __future__ import annotations

import multiprocessing
import sys

import lightning.pytorch as pl
import pytest
from torch.utils.data import DataLoader

from speedlab.analysis.doctor import diagnose
from speedlab.analysis.traps import notebook_traps
from speedlab.analysis.verdict import diagnose_sweep
from speedlab.labs import KnownCostDataset, KnownCostModel
from speedlab.results.run import RunResult
from tests.doctor_runs import QUIET, profile, the

FORKED_NOTE = (
    "NotebookData is defined in the notebook and workers start with 'spawn' here, which cannot "
    "import it: speedlab started the workers with 'fork' instead."
)


@pytest.fixture
def spawn_by_default():
    """Workers start with spawn, as on macOS and Windows."""
    saved = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    yield
    multiprocessing.set_start_method(saved, force=True)


def notebook_dataset() -> type:
    """A dataset class as a notebook cell defines it: it lives in ``__main__``."""
    return type("NotebookData", (KnownCostDataset,), {"__module__": "__main__"})


def test_a_notebook_dataset_under_spawn_is_a_notebook_trap(spawn_by_default) -> None:
    data = notebook_dataset()

    def train() -> None:
        loader = DataLoader(data(2000), batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.002), loader)

    run = profile(train, workers=1, steps=8).baseline
    assert run.ok
    found = the(diagnose(run), "notebook_trap")
    assert "NotebookData is defined in the notebook" in found.evidence
    assert ".py file" in found.advice


def test_workers_that_cannot_import_a_notebook_class_fail_and_the_doctor_explains(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = notebook_dataset()
    # As in a notebook, the class is found in __main__ here, but not in a spawned worker.
    monkeypatch.setattr(sys.modules["__main__"], data.__name__, data, raising=False)

    def train() -> None:
        context = multiprocessing.get_context("spawn")
        loader = DataLoader(
            data(2000), batch_size=8, num_workers=1, multiprocessing_context=context
        )
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.002), loader)

    sweep = profile(train, steps=8)
    assert sweep.baseline.error
    found = the(diagnose_sweep(sweep), "notebook_trap")
    assert found.severity == "critical"
    assert "defined in the notebook" in found.advice and "/dev/shm" in found.advice
    assert (found.knob, found.value) == ("workers", 0)


def notebook_fact(forked: bool) -> dict:
    return {"notebook_class": {"name": "NotebookData", "start_method": "spawn", "forked": forked}}


def test_the_trap_comes_from_the_runs_fact_not_from_its_sentences() -> None:
    refusal = (
        "NotebookClassError: --workers 2: NotebookData is defined in the notebook, and on this "
        "platform workers start with 'spawn', which cannot import it. Move it into a .py file "
        "next to the notebook and import it from there, or use --workers 0."
    )
    assert notebook_traps(RunResult(notes=[FORKED_NOTE])) == []
    assert notebook_traps(RunResult(error=refusal)) == []

    forked = RunResult(workload=notebook_fact(forked=True))
    [found] = notebook_traps(forked)
    assert (found.evidence, found.severity, found.knob) == (FORKED_NOTE, "info", None)
    stored = RunResult.from_dict(forked.to_dict())  # the fact is kept with the run
    assert notebook_traps(stored) == [found]

    [found] = notebook_traps(RunResult(error=refusal, workload=notebook_fact(forked=False)))
    assert found.evidence == f"The run failed: {refusal}"
    assert (found.severity, found.knob, found.value) == ("critical", "workers", 0)


def test_a_refused_notebook_class_is_a_fact_of_the_failed_run(
    spawn_by_default, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where fork is missing (Windows, macOS's default), the run is refused, and says why."""
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn", "forkserver"])
    data = notebook_dataset()

    def train() -> None:
        loader = DataLoader(data(200), batch_size=8)
        pl.Trainer(max_epochs=1, **QUIET).fit(KnownCostModel(step_s=0.002), loader)

    sweep = profile(train, workers=1, steps=8)
    run = sweep.baseline
    assert run.error.startswith("NotebookClassError: --workers 1: NotebookData is defined")
    assert run.workload["notebook_class"] == notebook_fact(forked=False)["notebook_class"]
    found = the(diagnose_sweep(sweep), "notebook_trap")
    assert (found.severity, found.evidence) == ("critical", f"The run failed: {run.error}")
