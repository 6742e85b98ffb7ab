"""The panel's controls: the values each knob offers, and those this machine cannot use.

A control shows the knob's choices (``KNOBS``' own, or ``OFFERED`` for knobs that take numbers
or names), "as written" (the cell's own value) first; ``hardware_limits`` says which values,
or which whole controls, this machine cannot use, and why, so the panel disables them with the
reason instead of running what cannot act.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path
from typing import Any

from speedlab.results.knobs import KNOBS, explain

AS_WRITTEN = "as written"
#: Values offered for knobs that take numbers or names (the others list their own choices).
OFFERED = {
    "workers": ("0", "1", "2", "4", "auto"),
    "batch_size": ("16", "32", "64", "128", "256", "512", "1024"),
    "devices": ("1", "2", "4"),
    "strategy": ("auto", "ddp_notebook", "ddp_spawn", "ddp", "fsdp"),
}
WHOLE = "*"  # in hardware_limits: the whole control is unusable


def hardware_limits() -> dict[str, dict[str, str]]:
    """Per knob, the values this machine cannot use and why (``"*"``: the whole control)."""
    import torch

    limits: dict[str, dict[str, str]] = {}
    if torch.cuda.is_available():
        if not torch.cuda.is_bf16_supported(including_emulation=False):
            reason = "this GPU would only emulate bf16, slowly (native bf16 needs Ampere or newer)"
            limits["precision"] = {"bf16-mixed": reason, "bf16-true": reason}
    else:
        limits["precision"] = {
            "16-mixed": "fp16 mixed precision needs a CUDA GPU; on a CPU Lightning runs "
            "bf16-mixed instead"
        }
        limits["pin_memory"] = {
            WHOLE: "pinned memory only speeds up copies to a CUDA GPU, and there is none"
        }
        limits["compile"] = {"reduce-overhead": "its CUDA graphs need a GPU"}
        limits["strategy"] = {"fsdp": "FSDP shards a model across GPUs; there are none"}
    if not any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "cl")):
        limits["compile"] = {
            WHOLE: "torch.compile builds C++ code for the CPU and no C++ compiler was found"
        }
    if not Path("/dev/shm").is_dir():
        limits["preload"] = {"shm": "this system has no /dev/shm"}
    return limits


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
