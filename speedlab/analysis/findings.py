"""What every doctor rule returns and reads: ``Finding``, the kinds in the doctor's order, and
the few figures of a run that several families of rules share.

Each family of rules (data, model, phases, stragglers...) has its own module; this one is the
bottom of them, so any rule module can import it and none needs another for the basics.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from speedlab.results.run import RunResult

STEPS_FOR_FIGURES = 5
"""Fewest steady steps before the figure-based rules say anything about a run (or a rank)."""

SEVERITIES = ("critical", "warn", "info")
KINDS = (
    "verdict",
    "notebook_trap",
    "overhead_bound",
    "io_bound",
    "cpu_bound",
    "copy_bound",
    "oversubscribed",
    "straggler",
    "epoch_start",
    "validation_heavy",
    "host_sync",
    "model_bound",
    "compile_payback",
    "preload_payback",
)
"""Every kind of finding, in the doctor's order: findings are listed, and autotune tries their
knobs, in this order (a triage: what blocks or distorts the others first), then by severity.
``verdict`` is the per-sweep summary; ``notebook_trap`` covers worker set-ups that fail or only
work by accident in a notebook."""


@dataclass(frozen=True)
class Finding:
    """One thing that limits a run, shown by its figures, with what to do about it.

    Args:
        kind: one of ``KINDS``.
        evidence: the measured figures that show it, in words.
        advice: what to do, and when it will not help.
        knob: the knob to try (a ``KNOBS`` name, or ``trainer.<argument>``), or None.
        severity: ``critical``, ``warn`` or ``info``.
        value: the knob value to try, or None.
    """

    kind: str
    evidence: str
    advice: str
    knob: str | None = None
    severity: str = "warn"
    value: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.severity not in SEVERITIES:
            raise ValueError(f"Finding(kind={self.kind!r}, severity={self.severity!r}): unknown.")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        tried = f" Try {option_text(self.knob, self.value)}." if self.knob else ""
        return f"[{self.severity}] {self.kind}: {self.evidence} {self.advice}{tried}"


DEVICE_NAMES = {"cuda": "GPU", "mps": "GPU", "xla": "TPU"}
"""What the texts call each kind of device (``torch.device.type``)."""


def device_name(run: RunResult) -> str:
    """The run's device as the texts name it: ``GPU`` for CUDA, or the device's own type."""
    return DEVICE_NAMES.get(run.device, run.device)


def option_text(knob: str, *values: Any) -> str:
    """The ``%%profile_train`` option that sets ``knob`` to ``values``: ``--batch-size 64,256``,
    ``--trainer limit_val_batches=0.25``. A knob's option is its name with dashes
    (``KnobSpec.option``; tests/run/test_next_step.py checks the two agree)."""
    text = ",".join(("on" if v else "off") if isinstance(v, bool) else str(v) for v in values)
    if knob.startswith("trainer."):
        return f"--trainer {knob.removeprefix('trainer.')}={text}"
    return f"--{knob.replace('_', '-')} {text}"


def unique_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Each finding once (the same kind on the same evidence), in first-seen order."""
    return list({(f.kind, f.evidence): f for f in findings}.values())


def in_doctors_order(findings: Iterable[Finding]) -> list[Finding]:
    """The findings sorted by kind (the order of ``KINDS``), then by severity."""
    return sorted(findings, key=lambda f: (KINDS.index(f.kind), SEVERITIES.index(f.severity)))


# -- what a run is made of ----------------------------------------------------------------------


def torch_threads(run: RunResult) -> int:
    """torch's intra-op threads in the main process (``torch.get_num_threads()``)."""
    return int(run.system.get("torch_threads") or 1)


def steady_values(run: RunResult, key: str) -> list[float]:
    """The records' ``key`` over the steady steps."""
    r = run.records
    return [v for v, p in zip(r[key], r["phase"], strict=True) if p == "steady"]


def step_wall(run: RunResult) -> float:
    """The median wall time of a steady step, NaN without steady steps."""
    walls = steady_values(run, "wall")
    return statistics.median(walls) if walls else math.nan


def batch_size(run: RunResult) -> int:
    """Samples per step (the batch size the run really used)."""
    samples = steady_values(run, "samples") or run.records["samples"]
    return int(statistics.median(samples)) if samples else 0


def differs(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    """The knobs set differently in two runs' ``knobs`` (``fit`` aside)."""
    keys = (set(a) | set(b)) - {"fit"}
    return {k for k in keys if a.get(k) != b.get(k)}


def rank_measured(entry: dict[str, Any]) -> bool:
    """Whether a rank (an entry of ``run.ranks``) ran enough steady steps for the rules to read
    its figures."""
    keys = ("data_time", "batch_time", "work_time")
    return entry["steps"] >= STEPS_FOR_FIGURES and all(entry[k] is not None for k in keys)
