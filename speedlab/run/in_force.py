"""What ran: the knob values in force in a fit, beside those asked for.

A knob can be asked for and not act: the loader is a subclass speedlab does not rebuild (its
workers stay the cell's), Lightning runs another precision than the one asked, a compile or a
preload is not applied, pinned memory has no device to copy to. The run records the values
that were in force, from the facts the probe and the fit recorded, so that labels, the table
and the doctor speak of what ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from speedlab.measure.devices import device_for
from speedlab.results.knobs import KNOBS, TRAINER_PREFIX, KnobError, Knobs
from speedlab.results.run import RunResult

if TYPE_CHECKING:
    from speedlab.run.fit_record import FitRecord

_LOADER_FACTS = {
    "workers": "loader_num_workers",  # each loader's: the knob's value is per loader
    "persistent_workers": "loader_persistent_workers",
    "batch_size": "loader_batch_size",
    "precision": "precision",
    "devices": "devices",
}
"""Knobs whose value in force the probe records (``RunResult.workload``), by the fact's name."""


def ran_otherwise(asked: Knobs, fit: FitRecord, measured: RunResult) -> dict[str, Any]:
    """The knobs asked for that ran with another value, and the value in force, where the
    fit shows it (``RunResult.ran_otherwise``)."""
    facts = measured.workload
    ran: dict[str, Any] = {
        knob: facts[fact]
        for knob, fact in _LOADER_FACTS.items()
        if getattr(asked, knob) is not None and _allowed(knob, facts.get(fact))
    }
    if asked.matmul is not None and facts.get("matmul") is not None:
        ran["matmul"] = facts["matmul"]  # the level in force as the fit started: the cell's own
    if asked.pin_memory is not None and "loader_pin_memory" in facts:
        pins = device_for(measured.device).pins_memory
        ran["pin_memory"] = bool(facts["loader_pin_memory"]) and pins
    if asked.compile not in (None, "off") and (fit.compiled is None or fit.compiled.acted is False):
        ran["compile"] = "off"  # not applied, or the training step called nothing compiled
    if asked.preload not in (None, "off") and not fit.preload_s:
        ran["preload"] = "off"
    if fit.prebuilt:  # built before the run: its own arguments stand
        ran |= {
            f"{TRAINER_PREFIX}{name}": getattr(fit.trainer, name)
            for name in asked.trainer
            if isinstance(getattr(fit.trainer, name, None), (bool, int, float, str))
        }
    return {knob: value for knob, value in ran.items() if asked[knob] != value}


def _allowed(knob: str, value: Any) -> bool:
    """Whether ``value`` is one the knob table takes (Lightning may run a precision it has
    no name for, such as a plugin's)."""
    try:
        KNOBS[knob].check(value)
    except KnobError:
        return False
    return value is not None
