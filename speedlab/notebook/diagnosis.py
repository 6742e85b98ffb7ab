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
SUMMARY_STYLE = "display:list-item;cursor:pointer"
"""A disclosure's summary keeps its marker: nbclassic's stylesheet shows summaries as blocks."""
KIND_PARTS = {
    **dict.fromkeys(
        ("notebook_trap", "io_bound", "cpu_bound", "copy_bound", "oversubscribed"), "data"
    ),
    **dict.fromkeys(("epoch_start", "preload_payback"), "data"),
    **dict.fromkeys(("overhead_bound", "host_sync", "model_bound", "compile_payback"), "step"),
}
"""The part of training a finding with no knob to try is about, by its kind; the verdict, a
straggler (a worker or a rank) and validation are about every sweep."""


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
    about = [f for f in sweep.diagnosis if finding_part(f) in parts | {None}]
    return about, [f for f in sweep.diagnosis if f not in about]


def finding_part(finding: Finding) -> str | None:
    """The part of training a finding is about: its knob's, else its kind's (``KIND_PARTS``)."""
    return knob_part(finding.knob) if finding.knob else KIND_PARTS.get(finding.kind)


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
        f'<li><details><summary style="{SUMMARY_STYLE}">'
        f"{html.escape(folded_line(f))}</summary>"
        f"{html.escape(str(f))}</details></li>"
        for f in others
    ]
    return f"<ul>{''.join(items)}</ul>" if items else ""
