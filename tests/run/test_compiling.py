"""The compile knob compiles what the training step runs, whichever module it calls, and the
model runs uncompiled after the fit. Real Lightning training, real torch.compile (inductor)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.nn import functional as F

import speedlab
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.measure.flops import compiled_modules as own_compiled
from speedlab.results.knobs import Knobs
from speedlab.results.run import RunResult
from speedlab.run.compiling import CACHE_TEXT, compile_step
from speedlab.run.intercept import Intercept, RunControls
from tests.doctor_runs import require_quiet


class SubmoduleStep(pl.LightningModule):
    """The common shape: ``training_step`` calls ``self.net(x)``, ``forward`` is never run."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 32), nn.Linear(32, 2))

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.predict(x), y)
        self.log("train_loss", loss)  # why the step itself is not compiled
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class ForwardStep(SubmoduleStep):
    """The other shape: the step calls ``self(x)``, whose ``forward`` calls ``self.net(x)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self(x)


class OwnWeightStep(SubmoduleStep):
    """A step whose work is in no module: nothing of it can be compiled."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 2))

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


@pytest.fixture(scope="module", autouse=True)
def inductor_pool() -> None:
    """Start every thread of inductor's compile pool before the tests. torch keeps that pool
    for the whole process once a compile starts it (and reuses it), so the first test to
    compile would otherwise be charged with its threads as leftovers."""
    from torch._inductor.async_compile import AsyncCompile, get_compile_threads

    threads = get_compile_threads()
    if threads > 1:
        together = threading.Barrier(threads)
        list(AsyncCompile.pool().map(lambda _: together.wait(timeout=30), range(threads)))


@pytest.fixture
def no_graph_cache() -> Iterator[None]:
    """Each compile compiles: an earlier test's cached graph would make its phase a cache read."""
    with (
        torch._inductor.config.patch(fx_graph_cache=False),
        torch._functorch.config.patch(enable_autograd_cache=False),
    ):
        yield


def graphs() -> int:
    return counters["stats"]["unique_graphs"]


def fit(model: pl.LightningModule, compile: str) -> tuple[RunResult, list[str], pl.Trainer]:
    with Intercept(Knobs(compile=compile), RunControls(steps=8, warmup=2)) as run:
        trainer = pl.Trainer(accelerator="cpu", **QUIET_TRAINER)
        trainer.fit(model, known_cost_loader(n=200, batch_size=8))
    return run.fits[0].probe.result(), run.fits[0].notes, trainer


def compiled_modules(model: nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if m._compiled_call_impl is not None]


@pytest.mark.parametrize("shape", [SubmoduleStep, ForwardStep])
def test_compile_on_runs_the_steps_module_compiled_and_undoes_it(
    shape: type[SubmoduleStep], no_graph_cache: None
) -> None:
    model = shape()
    plain, _, _ = fit(model, "off")
    before = graphs()
    compiled, notes, trainer = fit(model, "on")
    assert graphs() > before  # dynamo compiled the step's module
    assert compiled.phases["compile"] > max(0.1, 2 * plain.records["wall"][0])
    assert notes == []
    assert "train_loss" in trainer.callback_metrics  # self.log in the step still works
    # After the fit the model is the user's again: nothing compiled, and a plain fit compiles
    # nothing and has no compile phase.
    assert compiled_modules(model) == []
    before = graphs()
    again, notes, _ = fit(model, "off")
    assert graphs() == before and notes == []
    assert again.phases["compile"] == 0 and again.steps == 8


def test_a_step_with_nothing_to_compile_says_so() -> None:
    model = OwnWeightStep()
    _, notes, trainer = fit(model, "on")
    [note] = notes
    assert note.startswith("compile=on ran nothing compiled")
    assert "(forward, net)" in note and "x @ self.weight" in note
    assert "train_loss" in trainer.callback_metrics
    assert compiled_modules(model) == []


class Broken(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4), nn.ReLU()])
        self.loss = nn.MSELoss()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


def test_modules_compiled_are_the_weighted_ones_and_graph_breaks_are_noted() -> None:
    model = Broken()
    model.b._compiled_call_impl = users_own = object()  # the user's own compile comes back
    step = compile_step(model, "on")
    assert list(step.modules) == ["forward", "a", "b", "blocks.0"]
    try:
        model(torch.randn(2, 4))
    finally:
        notes = step.finish(trained=True)
        torch._dynamo.reset()
    [note] = [n for n in notes if "the compile phase" not in n]  # its cache is another note
    assert note.startswith("compile=on: the compiled code has graph breaks")
    assert "graph_break()" in note
    assert model.b._compiled_call_impl is users_own
    model.b._compiled_call_impl = None
    assert compiled_modules(model) == []


def test_the_compile_phase_says_whether_inductors_cache_was_cold_or_warm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # an empty cache on disk
    phases, states, results = [], [], []
    for _ in range(2):
        torch._dynamo.reset()  # the second compile starts from the disk cache alone
        with Intercept(Knobs(compile="on"), RunControls(steps=8, warmup=2)) as run:
            pl.Trainer(accelerator="cpu", **QUIET_TRAINER).fit(
                ForwardStep(), known_cost_loader(n=200, batch_size=8)
            )
        results.append(run.fits[0].probe.result())
        phases.append(results[-1].phases["compile"])
        states.append(run.fits[0].workload()["compile_cache"])
        assert f"the compile phase {CACHE_TEXT[states[-1]]}." in " ".join(run.fits[0].notes)
    assert states == ["cold", "warm"]
    # Reading compiled graphs is faster than compiling them, on a machine nothing else took
    # (beside other work, the two phases measured 0.83 s and 1.39 s).
    require_quiet(*results)
    assert phases[1] < phases[0]


def test_a_runs_compiled_code_serves_no_later_run_and_the_cells_own_is_kept(
    no_graph_cache: None,
) -> None:
    """After a run with the compile knob, the next one compiles its step afresh (its compile
    phase is measured, not a reuse), while a function the cell compiled itself keeps its code."""
    compiles = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        compiles.append(1)
        return gm.forward

    @torch.compile(backend=backend)
    def cells_own(x: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * 2

    cells_own(torch.randn(4))
    model = ForwardStep()
    fit(model, "on")
    before = graphs()
    again, _, _ = fit(model, "on")
    assert graphs() > before and again.phases["compile"] > 0
    cells_own(torch.randn(4))
    assert compiles == [1]


def test_the_cells_own_compile_is_named_and_said_to_stay_under_compile_off() -> None:
    """compile=off cannot undo a torch.compile the cell made itself: the run says so, and
    which modules, instead of calling its code uncompiled."""
    model = KnownCostModel(step_s=0.0)
    assert own_compiled(model) == []
    model.net.compile(backend="eager")  # in place
    assert own_compiled(model) == ["net"]
    model.net = torch.compile(nn.Linear(8, 2), backend="eager")  # wrapped
    assert own_compiled(model) == ["net"]

    def train() -> None:
        cell_model = KnownCostModel(step_s=0.0)
        cell_model.net.compile(backend="eager")
        pl.Trainer(max_steps=8, accelerator="cpu", **QUIET_TRAINER).fit(
            cell_model, known_cost_loader(n=200)
        )

    run = speedlab.profile_train(train, compile="off", live=False, store=False).baseline
    assert run.error is None
    assert any(
        n.startswith("The cell compiles net itself (torch.compile): compile=off cannot undo that")
        for n in run.notes
    )


def test_a_second_fit_of_the_same_model_reuses_the_compiled_code_and_ran_compiled() -> None:
    """Audit t03 c2: the second fit compiled no new graph, as its model's were compiled by the
    first; its steps ran that compiled code all the same, and it is not 'compile off'."""
    model = SubmoduleStep()
    with Intercept(Knobs(compile="on"), RunControls(steps=8, warmup=2)) as run:
        for _ in range(2):
            trainer = pl.Trainer(accelerator="cpu", **QUIET_TRAINER)
            trainer.fit(model, known_cost_loader(n=200, batch_size=8))
    first, second = (fit.compiled for fit in run.fits)
    assert first.acted and first.calls[0] >= 8
    assert second.acted and second.calls[0] >= 8 and second.graphs == graphs()  # none new
