"""Bottleneck doctor: a verdict on each run from its measured figures.

``diagnose(run)`` reads one RunResult and returns Findings: what limits the run (``kind``),
the figures that show it (``evidence``), what to do (``advice``) and the knob to try. Each
family of rules, with its thresholds, lives in its own module of speedlab.analysis (data,
model, phases, stragglers, host_sync, traps, ranks, recompiling); this one runs them in the doctor's order.
What only a sweep shows is ``diagnose_sweep`` (analysis/verdict.py); the line to run next,
``next_experiment``, is speedlab/run/next_step.py.

Advice is for the hardware the run measured: a knob that cannot help there is named as such.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from speedlab.analysis.data import data_bound, oversubscribed
from speedlab.analysis.findings import STEPS_FOR_FIGURES, in_doctors_order, steady_values
from speedlab.analysis.host_sync import host_sync
from speedlab.analysis.model import model_bound, overhead_bound
from speedlab.analysis.phases import epoch_start, validation_heavy
from speedlab.analysis.predict import with_prediction
from speedlab.analysis.ranks import rank_findings
from speedlab.analysis.recompiling import recompiling
from speedlab.analysis.stragglers import worker_straggler
from speedlab.analysis.traps import notebook_traps
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult

if TYPE_CHECKING:
    from speedlab.analysis.linter import LintFinding

__all__ = ["diagnose"]

_FIGURE_RULES = (
    recompiling,
    data_bound,
    overhead_bound,
    oversubscribed,
    epoch_start,
    validation_heavy,
    worker_straggler,
    model_bound,
)
"""The rules that read a run's steady-step figures, run only with ``STEPS_FOR_FIGURES``."""


def diagnose(
    run: RunResult, *, lint_findings: Sequence[LintFinding] | None = None
) -> list[Finding]:
    """What limits this run, most severe first, each finding with its evidence and the knob to
    try, with speedlab's prediction for that knob where it can make one.

    Args:
        run: a measured run.
        lint_findings: ``speedlab.lint(model)`` of the run's LightningModule, reported as
            ``host_sync`` findings.
    """
    findings = notebook_traps(run) + host_sync(run, lint_findings or [])
    if len(steady_values(run, "wall")) >= STEPS_FOR_FIGURES:
        for rule in _FIGURE_RULES:
            findings += rule(run)
    findings += rank_findings(run)  # outside the gate: a CUDA-before-fork run has no steps
    return in_doctors_order(with_prediction(run, finding) for finding in findings)
