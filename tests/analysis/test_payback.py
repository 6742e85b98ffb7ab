"""speedlab.analysis.payback: what compiling or preloading cost and when it pays off."""

from __future__ import annotations

import math
from dataclasses import replace

import lightning.pytorch as pl
import pytest
from torch.nn import functional as F

from speedlab.analysis.payback import PAYBACK_STEPS
from speedlab.analysis.verdict import judge_sweep
from speedlab.labs import KnownCostModel, busy_wait, known_cost_loader
from speedlab.measure.probe import SpeedProbe
from speedlab.results.knobs import Knobs
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.results.table import fmt_ms
from tests.doctor_runs import QUIET, the
from tests.records import run_of


class Forwarding(KnownCostModel):
    """KnownCostModel whose step goes through ``forward``, the part ``compile()`` compiles."""

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        busy_wait(self.step_s)
        return loss


def _probe_run(model: pl.LightningModule, compiled: bool) -> RunResult:
    probe = SpeedProbe(warmup=3, compiled=compiled)
    trainer = pl.Trainer(max_steps=20, callbacks=[probe], **QUIET)
    trainer.fit(model, known_cost_loader(n=2000, batch_size=8))
    return probe.result()


def test_compile_payback_reports_cost_and_break_even_or_never() -> None:
    # The forward is compiled in place and the probe told so: the engine's --compile path is
    # the runner's to test; here the doctor's arithmetic is.
    # 50 ms of busy-wait a step: a stray millisecond of the machine's (the first fit of a test
    # session, say) stays under the 5% that a comparison needs to call a change faster.
    plain = _probe_run(Forwarding(step_s=0.05), compiled=False)
    model = Forwarding(step_s=0.05)
    model.compile(backend="eager")  # dynamo's real tracing, without a C++ build
    compiled = _probe_run(model, compiled=True)
    off, on = Knobs(compile="off"), Knobs(compile="on")
    sweep = judge_sweep([replace(plain, knobs=off), replace(compiled, knobs=on)])
    found = the(sweep.diagnosis, "compile_payback")
    assert found.evidence.startswith("Compiling cost ")
    assert "Break-even" in found.advice
    # A busy-wait dominates each step, so compiling the tiny forward saves nothing measurable.
    assert "never" in found.advice and found.value == "off"


def preloaded(planned_steps: int) -> SweepResult:
    """Steps of 100 ms without preload, 10 ms with it after 3 s of preloading: break-even
    after 34 steps."""
    without = run_of([0.09] * 20, [0.01] * 20, knobs={"preload": "off"})
    with_it = run_of([0.0] * 20, [0.01] * 20, knobs={"preload": "ram"})
    with_it = replace(with_it, phases={"preload": 3.0})
    workload = {"planned_steps": planned_steps, "epoch_steps": 10}
    return judge_sweep([replace(run, workload=workload) for run in (without, with_it)])


def test_a_preload_that_pays_back_within_the_cell_says_when_and_what_it_saves() -> None:
    sweep = preloaded(planned_steps=200)
    found = the(sweep.diagnosis, "preload_payback")
    assert found.evidence.startswith("Preloading cost 3.0 s (before training)")
    assert "Break-even after 34 steps (0.3 s of training, 3.4 epochs of 10 steps)" in found.advice
    assert "Over the cell's own training (200 steps) it saves about 15.0 s in all" in found.advice
    assert (found.severity, found.value) == ("info", "ram")
    assert the(sweep.diagnosis, "verdict").advice == "Keep preload=ram."


def test_a_preload_longer_than_the_cells_training_is_not_recommended() -> None:
    sweep = preloaded(planned_steps=30)
    found = the(sweep.diagnosis, "preload_payback")
    assert "it costs 0.3 s more than it saves" in found.advice
    assert (found.severity, found.value) == ("warn", "off")
    verdict = the(sweep.diagnosis, "verdict")
    assert verdict.evidence.startswith("Best: preload=ram")  # per step it is faster...
    assert "only after 34 steps" in verdict.advice and "the cell's own 30 steps" in verdict.advice
    assert verdict.advice.endswith("Keep preload=ram only for longer training.")


def test_the_compile_evidence_says_whether_the_cache_was_warm() -> None:
    plain = run_of([0.0] * 20, [0.1] * 20, knobs={"compile": "off"})
    compiled = run_of([0.0] * 20, [0.05] * 20, knobs={"compile": "on"})
    compiled = replace(compiled, phases={"compile": 2.1}, workload={"compile_cache": "warm"})
    found = the(judge_sweep([plain, compiled]).diagnosis, "compile_payback")
    assert found.evidence.startswith(
        "Compiling cost 2.0 s (the first compiled step, with a warm compile cache: a first "
        "compile takes longer)"
    )


def test_break_even_and_the_speedup_it_follows_from_come_from_the_same_steps() -> None:
    """The preload run has a 400 ms pause and uneven steps: the break-even, the step times the
    finding states and the speedup are all read from the same counted steps."""
    waits = [0.02 if i % 3 == 0 else 0.003 for i in range(60)]
    without = run_of(waits, [0.01] * 60, knobs={"preload": "off"})
    batches = [0.01 if i % 4 else 0.02 for i in range(60)]
    batches[40] += 0.4
    with_it = replace(
        run_of([0.0] * 60, batches, knobs={"preload": "ram"}), phases={"preload": 2.0}
    )
    sweep = judge_sweep([without, with_it])
    run = sweep.runs[1]
    assert run.steady.pauses
    saving = without.step_time - run.step_time
    assert run.break_even == {"preload": math.ceil(2.0 / saving)}
    assert run.speedup == pytest.approx(without.step_time / run.step_time)
    found = the(sweep.diagnosis, "preload_payback")
    assert (
        f"steady steps take {fmt_ms(run.step_time)} with preload=ram against "
        f"{fmt_ms(without.step_time)} without ({run.speedup:.2f}x, faster"
    ) in found.evidence
    assert f"Break-even after {math.ceil(2.0 / saving)} steps" in found.advice


def test_where_the_cells_length_is_unknown_the_payback_is_held_to_payback_steps() -> None:
    """Without the cell's own length the break-even is compared with PAYBACK_STEPS, and the
    texts say so rather than 'this training' or 'a run of unknown length'."""
    sweep = preloaded(planned_steps=0)  # 34 steps: within
    found = the(sweep.diagnosis, "preload_payback")
    assert found.summary.endswith(
        f"won back after 34 steps, within {PAYBACK_STEPS} steps (this training's length is unknown)"
    )
    without = run_of([0.09] * 20, [0.01] * 20, knobs={"preload": "off"})
    slow = replace(
        run_of([0.0] * 20, [0.01] * 20, knobs={"preload": "ram"}), phases={"preload": 200.0}
    )
    sweep = judge_sweep([without, slow])  # 2223 steps: beyond
    found = the(sweep.diagnosis, "preload_payback")
    assert f"beyond {PAYBACK_STEPS} steps (this training's length is unknown)" in found.summary
    verdict = the(sweep.diagnosis, "verdict")
    assert (
        f"only after 2223 steps (22.2 s of training), more than the {PAYBACK_STEPS} steps "
        "speedlab counts on where the cell's length is unknown." in verdict.advice
    )
    assert "unknown length" not in verdict.advice
    # The cell's own length, where known, is what it is held to.
    assert the(preloaded(planned_steps=30).diagnosis, "preload_payback").summary.endswith(
        "beyond this training"
    )
