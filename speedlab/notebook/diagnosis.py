"""How a sweep shows its findings: in full those about what the sweep changed, one line each
for the others.

A sweep asks one question (do more workers help? does bf16?); the doctor answers every
question the runs raise. A finding about another part of training than the swept knobs' (the
data pipeline in a precision sweep) is folded to its first line, with the knob to try: it
stays in view, and the answer to the sweep's question comes first. ``sweep.diagnosis`` and
``%speedlab doctor`` give every finding in full.
"""

from __future__ import annotations

import html

from speedlab.analysis.findings import differs
from speedlab.results.findings import Finding
from speedlab.results.knobs import knob_part, option_text
from speedlab.results.sweep import SweepResult

FOLDED = "not about what this sweep changed"


def swept_parts(sweep: SweepResult) -> set[str]:
    """The parts of training (``knobs.PARTS``) whose knobs differ between the sweep's runs."""
    changed = set().union(*(differs(run.knobs, sweep.baseline.knobs) for run in sweep.runs))
    return {part for k in changed if (part := knob_part(k)) is not None}


def about_the_sweep(sweep: SweepResult) -> tuple[list[Finding], list[Finding]]:
    """The sweep's findings about the parts it changed (and those about no knob), and the
    others; all of them are about the sweep when it changed no knob of a known part."""
    parts = swept_parts(sweep)
    if not parts:
        return list(sweep.diagnosis), []
    about = [f for f in sweep.diagnosis if knob_part(f.knob or "") in parts | {None}]
    return about, [f for f in sweep.diagnosis if f not in about]


def folded_line(finding: Finding) -> str:
    """One line for a finding off the sweep's topic: its kind, severity and the knob to try."""
    tried = f" Try {option_text(finding.knob, finding.value)}." if finding.knob else ""
    return f"[{finding.severity}] {finding.kind} ({FOLDED}; in full: .diagnosis).{tried}"


def findings_text(sweep: SweepResult) -> list[str]:
    """The findings as the sweep's text shows them, one entry each."""
    about, others = about_the_sweep(sweep)
    return [str(f) for f in about] + [folded_line(f) for f in others]


def findings_html(sweep: SweepResult) -> str:
    """The findings as a list, those off the sweep's topic folded in a disclosure."""
    about, others = about_the_sweep(sweep)
    items = [f"<li>{html.escape(str(f))}</li>" for f in about] + [
        f"<li><details><summary>{html.escape(folded_line(f))}</summary>"
        f"{html.escape(str(f))}</details></li>"
        for f in others
    ]
    return f"<ul>{''.join(items)}</ul>" if items else ""
