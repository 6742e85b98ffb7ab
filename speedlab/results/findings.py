"""What the doctor says of a run or a sweep: ``Finding``, its kinds and severities.

The rules that make findings are speedlab.analysis; a finding is a record every layer reads
and the run store keeps, so it lives here with the other results.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from speedlab.results.codec import Name, Record
from speedlab.results.knobs import option_text


class Kind(Name):
    """Every kind of finding, in the doctor's order: findings are listed, and autotune tries
    their knobs, in this order (a triage: what blocks or distorts the others first), then by
    severity. ``verdict`` is the per-sweep summary; ``notebook_trap`` covers worker set-ups that
    fail or only work by accident in a notebook."""

    verdict = "verdict"
    notebook_trap = "notebook_trap"
    recompiling = "recompiling"
    overhead_bound = "overhead_bound"
    io_bound = "io_bound"
    cpu_bound = "cpu_bound"
    copy_bound = "copy_bound"
    oversubscribed = "oversubscribed"
    straggler = "straggler"
    epoch_start = "epoch_start"
    validation_heavy = "validation_heavy"
    host_sync = "host_sync"
    model_bound = "model_bound"
    compile_payback = "compile_payback"
    preload_payback = "preload_payback"


class Severity(Name):
    """How much a finding matters, most first."""

    critical = "critical"
    warn = "warn"
    info = "info"


HEADLINE_WORDS = 25
"""The most words in a finding's first sentence: a learner reads it in one breath."""

KINDS = tuple(kind.value for kind in Kind)
SEVERITIES = tuple(severity.value for severity in Severity)


@dataclass(frozen=True)
class Finding(Record):
    """One thing that limits a run, shown by its figures, with what to do about it.

    A finding reads in one breath first: its ``headline``, one sentence of at most
    ``HEADLINE_WORDS`` words (what limits the step, by how much, what to try); the evidence and
    the advice follow, folded in the notebook's views and in full in plain text.

    Args:
        kind: a ``Kind`` (or its name).
        evidence: the measured figures that show it, in words.
        advice: what to do, and when it will not help.
        knob: the knob to try (a ``KNOBS`` name, or ``trainer.<argument>``), or None.
        severity: a ``Severity`` (or its name).
        value: the knob value to try, or None.
        summary: what limits the step and by how much, in a few words, with what to do where
            no knob is named (the headline adds the knob); empty in findings stored by
            speedlab 0.1, whose headline is their evidence.
        predicted: speedlab's predicted speedup of the run with the knob's value
            (speedlab.analysis.predict), where its split can predict it; the headline names it.
    """

    kind: Kind
    evidence: str
    advice: str
    knob: str | None = None
    severity: Severity = Severity.warn
    value: Any = None
    summary: str = ""
    predicted: float | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", Kind(self.kind))
            object.__setattr__(self, "severity", Severity(self.severity))
        except ValueError:
            raise ValueError(
                f"Finding(kind={self.kind!r}, severity={self.severity!r}): unknown."
            ) from None

    @property
    def headline(self) -> str:
        """The finding in one sentence: its summary and the knob to try, with speedlab's
        prediction for it."""
        if not self.summary:
            return self.evidence
        tried = f"; try {option_text(self.knob, self.value)}" if self.knob else ""
        if self.knob and self.predicted is not None:
            tried += f" (predicted {self.predicted:.1f}x)"
        return f"{self.summary}{tried}."

    @property
    def title(self) -> str:
        """The headline with the finding's severity and kind, as every view starts it."""
        return f"[{self.severity}] {self.kind}: {self.headline}"

    @property
    def details(self) -> str:
        """What follows the headline: the figures that show it and what to do."""
        if self.summary:
            return f"{self.evidence} {self.advice}"
        return self.advice + (f" Try {option_text(self.knob, self.value)}." if self.knob else "")

    def __str__(self) -> str:
        return f"{self.title}\n    {self.details}"
