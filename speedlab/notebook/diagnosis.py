"""How a sweep shows its findings: in full those about what the sweep changed, one line each
for the others.

A sweep asks one question (do more workers help? does bf16?); the doctor answers every
question the runs raise. Every finding shows its headline (one sentence: what limits the
step, by how much, what to try), its evidence and advice folded under it in the notebook. A
finding about another part of training than the swept knobs' (the data pipeline in a
precision sweep) comes last, marked, and the sweep's text gives it one line: the answer to the
sweep's question comes first. ``sweep.diagnosis`` and ``%speedlab doctor`` give every finding
in full.
"""

from __future__ import annotations

import html

from speedlab.analysis.findings import differs
from speedlab.results.findings import Finding
from speedlab.results.knobs import knob_part
from speedlab.results.sweep import SweepResult

FOLDED = "not about what this sweep changed"
SUMMARY_STYLE = "display:list-item;cursor:pointer"
"""A disclosure's summary keeps its marker: nbclassic's stylesheet shows summaries as blocks."""
KIND_PARTS = {
    **dict.fromkeys(
        ("notebook_trap", "io_bound", "cpu_bound", "copy_bound", "oversubscribed"), "data"
    ),
    **dict.fromkeys(("epoch_start", "preload_payback"), "data"),
    **dict.fromkeys(
        ("recompiling", "overhead_bound", "host_sync", "model_bound", "compile_payback"), "step"
    ),
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
    """A finding off the sweep's topic in its one line: the headline, marked as off the topic."""
    return (
        f"[{finding.severity}] {finding.kind} ({FOLDED}; in full: .diagnosis): {finding.headline}"
    )


def findings_text(sweep: SweepResult) -> list[str]:
    """The findings as the sweep's text shows them, one entry each."""
    about, others = about_the_sweep(sweep)
    return [str(f) for f in about] + [folded_line(f) for f in others]


def finding_html(finding: Finding, title: str | None = None) -> str:
    """A finding as a disclosure: its title (the headline) shown, its evidence and advice
    folded under it."""
    return (
        f'<details><summary style="{SUMMARY_STYLE}">{html.escape(title or finding.title)}'
        f"</summary>{html.escape(finding.details)}</details>"
    )


def findings_list_html(findings: list[Finding], off_topic: list[Finding] = ()) -> str:
    """Findings as a list of disclosures, ``off_topic`` ones last and marked as such."""
    items = [finding_html(f) for f in findings] + [
        finding_html(f, folded_line(f)) for f in off_topic
    ]
    return f"<ul>{''.join(f'<li>{item}</li>' for item in items)}</ul>" if items else ""


def findings_html(sweep: SweepResult) -> str:
    """The sweep's findings as a list, those off the sweep's topic last and marked."""
    return findings_list_html(*about_the_sweep(sweep))
