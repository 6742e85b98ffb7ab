"""The doctor's rule on ``torch.compile``: what compiling cost, what it saves per step, and
after how many steps it pays off. Only a sweep shows it: it needs the same run compiled and
not."""

from __future__ import annotations

import math

from speedlab.analysis.compare import compare
from speedlab.analysis.findings import Finding, differs, step_wall
from speedlab.results.sweep import SweepResult
from speedlab.results.table import fmt_ms

COMPILE_PAYBACK_STEPS = 1000
"""Break-even step count up to which compiling is reported as paying off (info); beyond it, or
never, a warning."""


def compile_payback(sweep: SweepResult) -> list[Finding]:
    findings = []
    for run in sweep.runs:
        if not run.ok or run.knobs.get("compile") in (None, "off"):
            continue
        plain = next(
            (
                o
                for o in sweep.runs
                if o.ok
                and o.knobs.get("compile") in (None, "off")
                and differs(o.knobs, run.knobs) == {"compile"}
            ),
            None,
        )
        if plain is None:
            continue
        step_plain, step_compiled = step_wall(plain), step_wall(run)
        cost = max(0.0, run.phases.get("compile", 0.0) - step_plain)
        c = compare(plain, run)
        evidence = (
            f"Compiling cost {cost:.1f} s (first compiled step); steady steps take "
            f"{fmt_ms(step_compiled)} compiled against {fmt_ms(step_plain)} without ({c})."
        )
        saving = step_plain - step_compiled
        if c.verdict != "faster" or saving <= 0:
            advice = (
                "Break-even: never. Compiled steps are not faster here, so compiling only adds "
                "start-up time on this model and hardware: leave --compile off."
            )
            findings.append(Finding("compile_payback", evidence, advice, "compile", "warn", "off"))
            continue
        steps = math.ceil(cost / saving)
        advice = (
            f"Break-even after {steps} steps ({steps * step_compiled:.0f} s of training): compile "
            f"pays off for longer runs than that, and costs time in shorter ones."
        )
        severity = "info" if steps <= COMPILE_PAYBACK_STEPS else "warn"
        findings.append(
            Finding("compile_payback", evidence, advice, "compile", severity, run.knobs["compile"])
        )
    return findings
