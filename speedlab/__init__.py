"""speedlab: see where deep-learning training time goes, and which speed knobs pay off.

In a notebook::

    %load_ext speedlab

    %%profile_train --workers 0,2 --precision 32-true,bf16-mixed --steps 50
    trainer = L.Trainer(max_epochs=1)
    trainer.fit(model, datamodule)

The same engine without IPython: :func:`profile_train`, :class:`SpeedProbe`. Every sweep is
stored as it runs: :func:`history` lists the runs, :func:`load` gives a sweep back whole.

Importing speedlab is cheap: torch and Lightning load when a run starts.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it; loaded on first access
_LAZY = {
    "SpeedProbe": "speedlab.measure.probe",
    "RunResult": "speedlab.results.run",
    "SweepResult": "speedlab.results.sweep",
    "Knobs": "speedlab.results.knobs",
    "explain": "speedlab.results.knobs",
    "profile_train": "speedlab.api",
    "autotune": "speedlab.api",
    "Finding": "speedlab.results.findings",
    "diagnose": "speedlab.analysis.doctor",
    "verdicts": "speedlab.analysis.verdict",
    "history": "speedlab.results.history",
    "load": "speedlab.run.stored",
    "lint": "speedlab.analysis.linter",
    "LintFinding": "speedlab.analysis.linter",
    "SystemSampler": "speedlab.measure.system",
    "system_info": "speedlab.measure.machine",
}

__all__ = [*_LAZY, "labs", "last", "load_ipython_extension", "unload_ipython_extension"]

if TYPE_CHECKING:
    from speedlab import labs
    from speedlab.analysis.doctor import diagnose
    from speedlab.analysis.linter import LintFinding, lint
    from speedlab.analysis.verdict import verdicts
    from speedlab.api import autotune, profile_train
    from speedlab.measure.machine import system_info
    from speedlab.measure.probe import SpeedProbe
    from speedlab.measure.system import SystemSampler
    from speedlab.results.findings import Finding
    from speedlab.results.history import history
    from speedlab.results.knobs import Knobs, explain
    from speedlab.results.run import RunResult
    from speedlab.results.sweep import SweepResult
    from speedlab.run.stored import load


def __getattr__(name: str) -> Any:
    if name == "last":  # the SweepResult of the last cell, panel run or API call
        from speedlab.notebook import session

        return session.last
    if name == "labs":
        return importlib.import_module("speedlab.labs")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        # Kept, so later lookups find it without this function. (No submodule shares a public
        # name: importing it would set the package attribute to the module.)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'speedlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext speedlab``: register ``%%profile_train`` and ``%speedlab``."""
    from speedlab.notebook.magics import SpeedlabMagics

    ipython.register_magics(SpeedlabMagics)


def unload_ipython_extension(ipython: Any) -> None:
    """Nothing to undo: magics are re-registered on the next load."""
