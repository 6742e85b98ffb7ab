"""speedlab.analysis.compile: what compiling cost and when it pays off."""

from __future__ import annotations

import lightning.pytorch as pl
from torch.nn import functional as F

from speedlab.analysis.verdict import diagnose_sweep
from speedlab.labs import KnownCostModel, busy_wait, known_cost_loader
from speedlab.measure.probe import SpeedProbe
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from tests.doctor_runs import QUIET, the


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
    plain.knobs, compiled.knobs = {"compile": "off"}, {"compile": "on"}
    sweep = SweepResult([plain, compiled])
    found = the(diagnose_sweep(sweep), "compile_payback")
    assert found.evidence.startswith("Compiling cost ")
    assert "Break-even" in found.advice
    # A busy-wait dominates each step, so compiling the tiny forward saves nothing measurable.
    assert "never" in found.advice and found.value == "off"
