"""The doctor's rule on host syncs, operations that make the CPU wait for the GPU: those
measured per source line on a GPU run (``run.host_syncs``) and those the linter reads in the
LightningModule's source."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from speedlab.analysis.findings import device_name
from speedlab.measure.syncs import in_library, source_place
from speedlab.results.findings import Finding
from speedlab.results.run import RunResult

if TYPE_CHECKING:
    from speedlab.analysis.linter import LintFinding

SYNC_PLACES_SHOWN = 3
"""Source lines named in a measured host_sync finding, most syncs first."""
_SYNC_RULES = frozenset({"item", "cpu", "cuda_sync", "nonzero_sync", "empty_cache", "host_tensor"})


def host_sync(run: RunResult, lint_findings: Sequence[LintFinding]) -> list[Finding]:
    """What the GPU run measured (``run.host_syncs``), then what the lint read in the source."""
    on_gpu = run.device != "cpu"
    findings = _measured_syncs(run)
    for lf in lint_findings:
        sync = lf.rule in _SYNC_RULES
        evidence = f"Line {lf.line} of {lf.method} ({lf.file}): `{lf.code}`. {lf.message}"
        advice = f"Fix: {lf.fix}"
        if sync and not on_gpu:
            advice += (
                " On this CPU run it costs little (there is no device to wait for); on a GPU it "
                "stalls every step."
            )
        severity = "warn" if on_gpu or not sync else "info"
        does = (
            f"makes the CPU wait for the {device_name(run)}"
            if sync and on_gpu
            else "would make the CPU wait for a GPU"
            if sync
            else "slows the step"
        )
        summary = f"Line {lf.line} of {lf.method} {does} every step ({lf.rule}); fix it in the code"
        findings.append(Finding("host_sync", evidence, advice, None, severity, summary=summary))
    return findings


def _measured_syncs(run: RunResult) -> list[Finding]:
    watched = run.host_syncs
    lines = watched.get("lines") or []
    if not lines:
        return []
    steps = watched["steps"]
    per_step = sum(entry["count"] for entry in lines) / steps
    where = ", ".join(
        f"{source_place(e['file'], e['line'])} ({e['count'] / steps:.3g} a step)"
        for e in lines[:SYNC_PLACES_SHOWN]
    )
    more = len(lines) - SYNC_PLACES_SHOWN
    evidence = (
        f"Measured on the GPU over {steps} warm-up step(s) with "
        f"torch.cuda.set_sync_debug_mode: {per_step:.3g} synchronizing CUDA operation(s) a step, "
        f"at {where}" + (f" and {more} more place(s)." if more > 0 else ".")
    )
    yours = any(not in_library(e["file"]) for e in lines)
    advice = (
        "Each one makes the CPU wait until the GPU has finished all queued work, and the GPU "
        "then idles while the CPU catches up. "
        + (
            "In your code: keep values on the device (self.log(loss) rather than loss.item(); "
            "with prog_bar=True Lightning converts it to a number after every step, whatever the "
            "bar's refresh rate, so keep per-step values at prog_bar=False), "
            "make tensors with device=self.device, and print no tensors in the step; "
            "speedlab.lint(model) names the pattern on each line. "
            if yours
            else ""
        )
        + "Syncs inside torch or Lightning come from a setting: 16-mixed's gradient scaler "
        "checks for inf once a step (bf16-mixed needs no scaler)."
    )
    summary = (
        f"{per_step:.3g} operation(s) a step make the CPU wait for the GPU; remove them from the "
        "step"
    )
    severity = "warn" if yours else "info"
    return [Finding("host_sync", evidence, advice, None, severity, summary=summary)]
