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


KINDS = tuple(kind.value for kind in Kind)
SEVERITIES = tuple(severity.value for severity in Severity)


@dataclass(frozen=True)
class Finding(Record):
    """One thing that limits a run, shown by its figures, with what to do about it.

    Args:
        kind: a ``Kind`` (or its name).
        evidence: the measured figures that show it, in words.
        advice: what to do, and when it will not help.
        knob: the knob to try (a ``KNOBS`` name, or ``trainer.<argument>``), or None.
        severity: a ``Severity`` (or its name).
        value: the knob value to try, or None.
    """

    kind: Kind
    evidence: str
    advice: str
    knob: str | None = None
    severity: Severity = Severity.warn
    value: Any = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", Kind(self.kind))
            object.__setattr__(self, "severity", Severity(self.severity))
        except ValueError:
            raise ValueError(
                f"Finding(kind={self.kind!r}, severity={self.severity!r}): unknown."
            ) from None

    def __str__(self) -> str:
        tried = f" Try {option_text(self.knob, self.value)}." if self.knob else ""
        return f"[{self.severity}] {self.kind}: {self.evidence} {self.advice}{tried}"
