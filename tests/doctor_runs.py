"""Short profiled runs for the tests of the doctor's rules (tests/analysis/, and the next
experiment in tests/run/test_next_step.py): the helpers that make and read them, and the sweeps
that several test modules share, as session fixtures (registered by tests/conftest.py).

Runs are short (tens of steps) on the known-cost workload and the labs. Workloads are chosen so
the verdict holds with a margin on a shared 2-core machine: costs are sleeps or busy-waits set
in advance, and image-lab throttles make reads dominate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import lightning.pytorch as pl
import pytest
from torch.nn import functional as F
from torch.utils.data import DataLoader

import speedlab
from speedlab.analysis.compare import other_processes_cores
from speedlab.analysis.data import CONTENDED_CORES
from speedlab.labs import (
    QUIET_TRAINER,
    KnownCostModel,
    ThrottledOpener,
    image_lab,
    known_cost_loader,
    tabular_lab,
)
from speedlab.measure.system import SystemSampler
from speedlab.results.findings import HEADLINE_WORDS, Finding
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult

QUIET = dict(accelerator="cpu", num_sanity_val_steps=0, **QUIET_TRAINER)
IMAGES = {"n": 400, "size": 32}


def profile(train: Callable[[], None], **options) -> SweepResult:
    return speedlab.profile_train(train, live=False, store=False, **options)


def kinds(findings: list[Finding]) -> list[str]:
    for finding in findings:
        assert_one_breath(finding)
    return [f.kind for f in findings]


def the(findings: list[Finding], kind: str) -> Finding:
    [found] = [f for f in findings if f.kind == kind]
    assert_one_breath(found)
    return found


def assert_one_breath(finding: Finding) -> None:
    """A rule's finding starts with one sentence of at most HEADLINE_WORDS words (issue 26): the
    rule gave it a summary, and the headline is a single sentence."""
    headline = finding.headline
    assert finding.summary, f"{finding.kind}: the rule gave no summary: {finding}"
    assert len(headline.split()) <= HEADLINE_WORDS, f"{len(headline.split())} words: {headline}"
    assert headline.endswith(".") and not re.search(r"[.!?] [A-Z]", headline[:-1]), headline


class Validated(KnownCostModel):
    """KnownCostModel with a validation step."""

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))


def require_quiet(*runs: RunResult, below: float = CONTENDED_CORES) -> None:
    """Skip when other processes took ``below`` cores or more during a run.

    The doctor then says its figures are uncertain: a loader starved of CPU looks idle, and
    tiny steps look long. Tests of such verdicts need a quiet machine; known answers to the
    millisecond, a quieter one.
    """
    others = max(other_processes_cores(run) for run in runs)
    if others >= below:
        pytest.skip(f"other processes used {others:.1f} cores during the run")


T = TypeVar("T")
WATCH_INTERVAL_S = 3600.0  # longer than any test's work: a reading at its start and its end


def watched(work: Callable[[], T]) -> tuple[T, RunResult]:
    """What ``work()`` returns, and the machine's CPU while it ran as a run (its ``system``
    alone) for ``require_quiet``: for timings taken outside a profiled run, such as the
    overhead benchmark's. Two readings, at the start and the end, so nothing samples between."""
    with SystemSampler(interval_s=WATCH_INTERVAL_S) as sampler:
        result = work()
    return result, RunResult(system=sampler.summary())


def known_cost(
    *, step_s: float = 0.005, val: DataLoader | None = None, trainer: dict | None = None, **data
) -> Callable[[], None]:
    """A cell training KnownCostModel on ``known_cost_loader(**data)`` for one epoch."""

    def train() -> None:
        fit = pl.Trainer(**{"max_epochs": 1, **QUIET, **(trainer or {})})
        model = (Validated if val is not None else KnownCostModel)(step_s=step_s)
        fit.fit(model, known_cost_loader(**data), val)

    return train


def images(root: Path, **data) -> Callable[[], None]:
    def train() -> None:
        model, module = image_lab(root=root, **IMAGES, **data)
        pl.Trainer(max_epochs=20, limit_val_batches=0, **QUIET).fit(model, module)

    return train


@pytest.fixture(scope="session")
def image_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("images")


@pytest.fixture(scope="session")
def image_sweep(image_root: Path) -> SweepResult:
    """The image lab as written (workers=0), then with 4 workers on this small machine."""
    return profile(images(image_root), workers=[0, 4], steps=15)


@pytest.fixture(scope="session")
def throttled_sweep(image_root: Path) -> SweepResult:
    """The image lab on slow storage (10 ms per file): reads dominate every step."""
    slow = ThrottledOpener(bytes_per_s=4e6, latency_s=0.01)
    return profile(images(image_root, throttle=slow, batch_size=8), workers=[0, 2], steps=15)


@pytest.fixture(scope="session")
def batch_sweep() -> SweepResult:
    """Each step costs 20 ms whatever the batch: twice the batch is a real 2x in samples/s."""
    return profile(known_cost(step_s=0.02, n=2000, batch_size=8), batch_size=[8, 16], steps=15)


@pytest.fixture(scope="session")
def tabular_sweep() -> SweepResult:
    """The MLP lab as written: tiny steps, dominated by the framework's fixed work per step."""

    def train() -> None:
        model, data = tabular_lab()
        pl.Trainer(max_epochs=1, limit_val_batches=0, **QUIET).fit(model, data)

    return profile(train, steps=40)
