"""Tests for speedlab.analysis.linter: each rule flags its pattern in per-step code and nothing else."""

from __future__ import annotations

import ast
import dataclasses
import linecache
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from speedlab.analysis.linter import RULES, LintError, LintFinding, lint

ROOT = Path(__file__).resolve().parents[2]

# One bad/good pair per rule. Each bad class has exactly one finding, for its rule.


class ItemBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        self.log("loss", loss.item())
        return loss


class ItemGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        self.log("loss", loss)
        return loss


class CpuBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        self.seen = batch.argmax(1).cpu()
        return batch.sum()


class CpuGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        self.seen = batch.argmax(1)
        return batch.to(self.device).sum()


class CudaSyncBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        torch.cuda.synchronize()
        return loss


class CudaSyncGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        if torch.cuda.is_available():
            self.mark = torch.cuda.Event(enable_timing=True)
        return batch.sum()


class EmptyCacheBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        torch.cuda.empty_cache()
        return batch.sum()


class EmptyCacheGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        self.log("mem", torch.cuda.memory_allocated())
        return batch.sum()


class HostTensorBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        weights = torch.ones(batch.shape[1]).to(self.device)
        return (batch * weights).sum()


class HostTensorGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        weights = torch.ones(batch.shape[1], device=self.device)
        batch = batch.to(self.device)
        noise = torch.zeros_like(batch).to(self.device)
        return (batch * weights + noise).to(torch.float32).sum()


class PrintBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        print("loss", loss)
        return loss


class PrintGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        self.log("loss", loss)
        return loss


class NonzeroBad(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        positive = batch[(batch > 0).nonzero(as_tuple=True)]
        return positive.sum()


class NonzeroGood(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return torch.where(batch > 0, batch, 0).sum()


# rule, text the flagged line must contain, bad class, good class
CASES = [
    ("item", ".item()", ItemBad, ItemGood),
    ("cpu", ".cpu()", CpuBad, CpuGood),
    ("cuda_sync", "torch.cuda.synchronize()", CudaSyncBad, CudaSyncGood),
    ("empty_cache", "torch.cuda.empty_cache()", EmptyCacheBad, EmptyCacheGood),
    ("host_tensor", "torch.ones(", HostTensorBad, HostTensorGood),
    ("print", "print(", PrintBad, PrintGood),
    ("nonzero_sync", ".nonzero(", NonzeroBad, NonzeroGood),
]


def test_every_rule_has_a_case():
    assert {case[0] for case in CASES} == set(RULES)


@pytest.mark.parametrize(("rule", "pattern", "bad", "good"), CASES, ids=[c[0] for c in CASES])
def test_rule_flags_its_pattern_on_the_right_line(rule, pattern, bad, good):
    [finding] = lint(bad)
    assert finding.rule == rule
    assert finding.method == "training_step"
    assert pattern in finding.code
    assert linecache.getline(finding.file, finding.line).strip() == finding.code
    assert finding.file == __file__


@pytest.mark.parametrize(("rule", "pattern", "bad", "good"), CASES, ids=[c[0] for c in CASES])
def test_rule_spares_the_fixed_code(rule, pattern, bad, good):
    assert lint(good) == []


@pytest.mark.parametrize(
    ("rule", "expr", "flagged"),
    [
        ("item", "loss.item()", True),
        ("item", "d.item(0)", False),
        ("item", "d.items()", False),
        ("cpu", "x.numpy()", True),
        ("cpu", "x.tolist()", True),
        ("cpu", "x.detach()", False),
        ("cuda_sync", "torch.cuda.synchronize(0)", True),
        ("cuda_sync", "torch.cuda.is_available()", False),
        ("host_tensor", "torch.zeros(3).cuda()", True),
        ("host_tensor", "torch.arange(5).to('cuda:0')", True),
        ("host_tensor", "torch.randn(2, 2).to(device)", True),
        ("host_tensor", "torch.tensor([1.0]).to(device=x.device)", True),
        ("host_tensor", "torch.eye(3).to(torch.device('cuda'))", True),
        ("host_tensor", "torch.zeros(3).to(torch.float16)", False),
        ("host_tensor", "torch.zeros(3).to('cpu')", False),
        ("host_tensor", "torch.zeros_like(x).cuda()", False),
        ("host_tensor", "x.to(self.device)", False),
        ("host_tensor", "x.cuda()", False),
        ("print", "print(x)", True),
        ("print", "self.print(x)", False),
        ("nonzero_sync", "torch.nonzero(mask)", True),
        ("nonzero_sync", "torch.where(mask, x, 0)", False),
    ],
)
def test_rule_matcher_table(rule, expr, flagged):
    call = ast.parse(expr, mode="eval").body
    assert (RULES[rule].match(call) is not None) == flagged


def test_finding_text_names_the_fix():
    [finding] = lint(HostTensorBad)
    assert isinstance(finding, LintFinding)
    assert str(finding) == f"line {finding.line}: {finding.message} Fix: {finding.fix}"
    assert "torch.ones(..., device=self.device)" in finding.fix
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.line = 1  # type: ignore[misc]


def test_instance_and_class_give_the_same_findings():
    assert lint(ItemBad()) == lint(ItemBad)


class Helpers(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def forward(self, x):
        out = self.layer(x)
        print(out.shape)
        return out

    def training_step(self, batch, batch_idx):
        loss = self.shared_step(batch)
        return loss

    def shared_step(self, batch):
        return self(batch).sum() + self._penalty(batch)

    @torch.no_grad()
    def _penalty(self, batch):
        """Also follows decorated helpers.

        Continuation lines at column 0 inside a docstring must not break parsing.
        """
        self.last = batch.mean().cpu()
        return 0

    def validation_step(self, batch, batch_idx):
        return self(batch).sum().item()


def test_follows_self_calls_transitively():
    found = {(f.rule, f.method) for f in lint(Helpers)}
    assert found == {("print", "forward"), ("cpu", "_penalty")}


class Base(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        print(batch_idx)
        return self.compute(batch)

    def compute(self, batch):
        return batch.sum()


class Child(Base):
    def training_step(self, batch, batch_idx):
        self.log("n", torch.tensor(1.0).cuda())
        return super().training_step(batch, batch_idx)

    def compute(self, batch):
        return batch.sum() + batch.max().item()


def test_follows_inherited_methods_and_super():
    found = {(f.rule, f.method, f.code) for f in lint(Child)}
    assert found == {
        ("host_tensor", "training_step", 'self.log("n", torch.tensor(1.0).cuda())'),
        ("print", "training_step", "print(batch_idx)"),
        ("item", "compute", "return batch.sum() + batch.max().item()"),
    }
    assert {f.rule for f in lint(Base)} == {"print"}


class PerStepHooks(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return batch.sum()

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self.history.append(outputs.item())

    def on_before_optimizer_step(self, optimizer):
        torch.cuda.empty_cache()


def test_checks_hooks_that_run_every_step():
    found = {(f.rule, f.method) for f in lint(PerStepHooks)}
    assert found == {("item", "on_train_batch_end"), ("empty_cache", "on_before_optimizer_step")}


class OutsideTheStep(pl.LightningModule):
    def __init__(self):
        super().__init__()
        print(torch.zeros(1).item())
        self.total = torch.zeros(1)

    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        self.total += loss.detach()
        if batch_idx % 100 == 0:
            print("loss", loss.item(), self.report())
        else:
            self.log("loss", loss)
        return loss

    def report(self):
        return self.total.cpu()

    def on_train_epoch_end(self):
        print(self.total.item())
        torch.cuda.synchronize()

    def configure_optimizers(self):
        print(torch.zeros(1).tolist())
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_code_that_does_not_run_every_step_is_not_flagged():
    assert lint(OutsideTheStep) == []


class Recursive(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        return self.ping(batch, 3)

    def ping(self, batch, n):
        return self.pong(batch, n) if n else batch.sum()

    def pong(self, batch, n):
        print(n)
        return self.ping(batch, n - 1)


def test_recursive_helpers_are_checked_once():
    assert [(f.rule, f.method) for f in lint(Recursive)] == [("print", "pong")]


def test_class_built_with_type_is_linted_from_its_functions_source():
    def training_step(self, batch, batch_idx):
        return batch.sum().item()

    built = type("Built", (pl.LightningModule,), {"training_step": training_step})
    [finding] = lint(built)
    assert (finding.rule, finding.code) == ("item", "return batch.sum().item()")


def test_source_not_available_raises_lint_error():
    namespace: dict[str, object] = {}
    # Compiled the way `python -c` compiles its argument: no file, nothing in linecache.
    source = "def training_step(self, batch, batch_idx):\n    return batch.sum()\n"
    exec(compile(source, "<string>", "exec"), namespace)
    built = type("Built", (pl.LightningModule,), {"training_step": namespace["training_step"]})
    with pytest.raises(LintError, match=r"cannot lint Built\.training_step: .*'<string>'") as info:
        lint(built)
    assert isinstance(info.value, ValueError)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (42, r"lint\(42\): .* got int$"),
        (torch.nn.Linear, "got class Linear"),
        (type("LightningModule", (), {}), "got class LightningModule"),  # a look-alike
    ],
)
def test_bad_input_is_a_type_error_naming_it(value, shown):
    with pytest.raises(TypeError, match=f"{shown}") as info:
        lint(value)
    assert "expected a LightningModule class or instance" in str(info.value)


@pytest.fixture
def shell(tmp_path):
    config = Config()
    config.HistoryManager.hist_file = str(tmp_path / "history.sqlite")
    InteractiveShell.clear_instance()
    yield InteractiveShell.instance(config=config)
    InteractiveShell.clear_instance()


CELL = """\
import lightning.pytorch as pl

class MyModule(pl.LightningModule):
    def training_step(self, batch, batch_idx):
        loss = batch.sum()
        self.log("loss", loss.item())
        return loss
"""


def test_class_defined_in_an_ipython_cell(shell):
    assert shell.run_cell(CELL).success
    [finding] = lint(shell.user_ns["MyModule"])
    assert finding.rule == "item"
    assert finding.line == 6
    assert linecache.getline(finding.file, finding.line).strip() == finding.code
    assert finding.file.startswith("<ipython-input-")


def test_cell_magic_that_keeps_no_source_raises_lint_error(shell):
    assert shell.run_cell("%%time\n" + CELL).success
    with pytest.raises(LintError, match="'<timed exec>', which keeps no source"):
        lint(shell.user_ns["MyModule"])


def test_import_does_not_load_torch():
    code = (
        "import sys, speedlab.analysis.linter; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)
