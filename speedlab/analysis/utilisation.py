"""How far a run is from what its device can do: the FLOPs of its steps per second over the
device's peak (MFU, ``RunResult.mfu``), in words for the report, the notes and the doctor."""

from __future__ import annotations

from speedlab.results.run import RunResult

LOW_MFU = 0.10
"""Below this share of the peak, a step's time goes mostly to other work than its arithmetic
(small kernels, Python, memory traffic)."""


def mfu_text(run: RunResult) -> str:
    """The run's MFU with the peak it is a share of, or why it is unknown."""
    flops = run.flops
    if flops.get("uncounted"):
        ops = ", ".join(flops["uncounted"])
        return f"unknown: {ops} has no FLOP formula in torch, so a count would be too low"
    if not flops.get("per_step"):
        return "unknown: no step's FLOPs were counted (a compiled run, or no warm-up step)"
    if run.mfu is None:
        return f"unknown: {flops.get('peak_source') or 'no peak is known for the device'}"
    return f"{run.mfu:.1%} of {flops['peak_source']} ({flops['per_step'] / 1e9:.3g} GFLOP a step)"


def flops_notes(run: RunResult) -> list[str]:
    """A note where a step ran arithmetic that torch cannot count: its MFU is left unknown."""
    return [f"MFU {mfu_text(run)}."] if run.flops.get("uncounted") else []


def utilisation(run: RunResult) -> str:
    """A sentence for the doctor's evidence on what the step's arithmetic reaches ('' where
    unknown)."""
    if run.mfu is None:
        return ""
    low = (
        ": its time goes to small kernels, Python and memory traffic, not arithmetic"
        if run.mfu < LOW_MFU
        else ""
    )
    return f" The steps reach {mfu_text(run)}{low}."
