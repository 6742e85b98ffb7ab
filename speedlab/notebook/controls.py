"""The panel's controls: the values each knob offers, and those this machine cannot use.

A control shows the knob's choices (``KNOBS``' own, or ``OFFERED`` for knobs that take numbers
or names), "as written" (the cell's own value) first; ``hardware_limits`` says which values,
or which whole controls, cannot act on the device a run here trains on, and why, so the panel
disables them with the reason instead of running what cannot act. It asks the device layer
(``speedlab.measure.devices``): what the device refuses (``Device.refusal``), whether it pins
memory, what amp runs as there.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path
from typing import Any

from speedlab.measure.devices import Device, default_device
from speedlab.results.knobs import KNOBS, explain, option_text

AS_WRITTEN = "as written"
#: Values offered for knobs that take numbers or names (the others list their own choices).
OFFERED = {
    "workers": ("0", "1", "2", "4", "auto"),
    "batch_size": ("16", "32", "64", "128", "256", "512", "1024"),
    "devices": ("1", "2", "4"),
    "strategy": ("auto", "ddp_notebook", "ddp_spawn", "ddp", "fsdp"),
}
WHOLE = "*"  # in hardware_limits: the whole control is unusable


def hardware_limits(device: Device | None = None) -> dict[str, dict[str, str]]:
    """Per knob, the values a run on ``device`` cannot use and why (``"*"``: the whole
    control). ``device`` is the one a run here trains on unless its Trainer says otherwise
    (``default_device``), unless given."""
    device = default_device() if device is None else device
    limits: dict[str, dict[str, str]] = {}
    if precision := precision_limits(device):
        limits["precision"] = precision
    if not device.pins_memory:
        reason = "pinned memory only speeds up copies to a CUDA GPU, and there is none here"
        limits["pin_memory"] = {WHOLE: reason}
    if device.type != "cuda":  # features of CUDA itself, not of a device speedlab times
        limits["compile"] = {"reduce-overhead": "its CUDA graphs need a CUDA GPU"}
        limits["strategy"] = {"fsdp": "FSDP shards a model across CUDA GPUs; there are none"}
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "cl")):
        limits["compile"] = {
            WHOLE: "torch.compile builds C++ code for the CPU and no C++ compiler was found"
        }
    if not Path("/dev/shm").is_dir():
        limits["preload"] = {"shm": "this system has no /dev/shm"}
    return limits | refused(device)


def precision_limits(device: Device) -> dict[str, str]:
    """The precisions a run on ``device`` cannot use, read from what amp runs as there
    (``Device.amp``): no mixed precision where amp is not mixed (XLA), no bf16 where amp falls
    back to fp16 (a GPU without native bf16), and Lightning's own rule on the CPU (it runs
    bf16-mixed for 16-mixed)."""
    amp, _ = device.amp()
    if not amp.endswith("-mixed"):
        why = f"no mixed precision runs on the {device.name} here: amp runs as {amp}"
        return {"16-mixed": why, "bf16-mixed": why}
    if amp == "16-mixed":
        why = (
            f"amp runs as 16-mixed on the {device.name} here: bf16 is not native there (slow "
            "or unsupported)"
        )
        return {"bf16-mixed": why, "bf16-true": why}
    if device.type == "cpu":
        why = "fp16 mixed precision needs a GPU; on a CPU Lightning runs bf16-mixed instead"
        return {"16-mixed": why}
    return {}


def refused(device: Device) -> dict[str, dict[str, str]]:
    """The values ``device`` refuses (``Device.refusal``), with its reason; a control whose
    every value but off is refused cannot be used at all."""
    limits: dict[str, dict[str, str]] = {}
    for name, spec in KNOBS.items():
        acting = [value for value in choices(name) if value != "off"]
        reasons = {
            value: why.removeprefix(f"{option_text(name, spec.check(value))}: ")
            for value in acting
            if (why := device.refusal(name, spec.check(value)))
        }
        if reasons and len(reasons) == len(acting):
            limits[name] = {WHOLE: next(iter(reasons.values()))}
        elif reasons:
            limits[name] = reasons
    return limits


def limit_note(limited: dict[str, str]) -> str:
    """What a control's limits say beside it: why it cannot be used, or which values it does
    not offer and why."""
    if WHOLE in limited:
        return f"not available: {limited[WHOLE]}"
    return "; ".join(f"{value} not offered: {why}" for value, why in limited.items())


def tooltip(name: str, limited: dict[str, str]) -> str:
    """A control's tooltip: its knob's teaching text, after the reason where the control
    cannot be used."""
    if WHOLE in limited:
        return f"{limit_note(limited)}\n\n{explain(name)}"
    return explain(name)


def choices(name: str) -> tuple[str, ...]:
    """The values a control offers for knob ``name``."""
    spec = KNOBS[name]
    return spec.choices or OFFERED.get(name, ())


def value_text(value: Any) -> str:
    """A knob value as the controls write it (``True`` -> ``on``)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def help_html(name: str) -> str:
    """The knob's teaching text, as the control's help."""
    return f'<div style="max-width:620px"><small>{html.escape(explain(name))}</small></div>'
