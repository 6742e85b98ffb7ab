"""The next experiment: from what the doctor found in a run, the knob value to try next
(``next_step``, which autotune follows) and the ``%%profile_train`` line that tries it on a
sweep's best run (``next_experiment``, printed by ``%speedlab doctor``).

It lives in speedlab.run, not beside the doctor, because it knows the knobs (``KNOBS``): the
doctor's findings name a knob, and this module turns them into options to run.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from speedlab.analysis.compare import NOISY_IQR
from speedlab.analysis.doctor import diagnose
from speedlab.analysis.findings import batch_size, differs
from speedlab.results.findings import Finding
from speedlab.results.knobs import KNOBS, option_text
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult


def current_value(run: RunResult, knob: str) -> Any:
    """The knob's value in this run: the knob in force when set, else what the run shows or
    the default."""
    if knob in run.ran:
        return run.ran[knob]
    inferred: dict[str, Any] = {
        "workers": run.loader_workers(),
        "batch_size": batch_size(run),
        "preload": "off",
        "compile": "on" if run.phases.get("compile", 0) > 0 else "off",
        "persistent_workers": False,
        "pin_memory": False,
        "precision": "32-true",
        "matmul": "highest",
        "trainer.limit_val_batches": 1.0,
    }
    return inferred.get(knob)


def next_step(run: RunResult, tried: Iterable[tuple[str, Any]] = ()) -> Finding | None:
    """The first finding of the run with a knob value not yet tried, in the doctor's order."""
    done = set(tried)
    for finding in diagnose(run):
        if finding.knob is None or finding.value is None:
            continue
        if (
            finding.value == current_value(run, finding.knob)
            or (finding.knob, finding.value) in done
        ):
            continue
        return finding
    return None


def next_experiment(sweep: SweepResult) -> str:
    """The exact ``%%profile_train`` line to run next.

    It keeps the best run's knobs and sweeps the top finding's knob from its current value to
    the suggested one, so the new baseline is today's best and the change is measured against
    it. With nothing left to try, it repeats the best configuration three times to confirm it.
    """
    best = sweep.best or sweep.baseline
    base = best.knobs.as_dict()
    tried = {
        (k, v)
        for run in sweep.runs
        for k, v in run.knobs.items()
        if differs(run.knobs, base) <= {k}
    }
    finding = next_step(best, tried)
    parts = ["%%profile_train"]
    if finding is not None:
        base.pop(finding.knob, None)
    trainer = {k: v for k, v in base.items() if k.startswith("trainer.")}
    parts += [option_text(k, v) for k, v in base.items() if k in KNOBS]
    parts += [option_text(k, v) for k, v in trainer.items()]
    if finding is not None:
        parts.append(option_text(finding.knob, current_value(best, finding.knob), finding.value))
    if best.steps:
        parts.append(f"--steps {best.steps}")
    if finding is None or best.throughput_summary.relative_iqr > NOISY_IQR:
        parts.append("--repeat 3")
    return " ".join(parts)
