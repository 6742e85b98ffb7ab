"""speedlab's own callbacks out of the trainer's list while it trains steps.

Lightning dispatches each of a training step's six callback hooks (``on_train_batch_start`` to
``on_train_batch_end``) by looking it up on every callback in ``trainer.callbacks``, and skips
one that is not callable. speedlab's callbacks listen to none of them (their hooks are None),
yet each lookup of a listed callback costs the step: inside Lightning's step, where what it
touches has left the caches, 1.4 to 1.8 us a step for the probe on the zero-cost step of
``benchmarks/probe_overhead.py`` on a quick morning (bare's step 0.8 ms), about 5 on a slow
day (3.0 ms; by runs hours apart, 2026-12-02: the README's figures). So while the epoch loop
runs, its list holds the user's callbacks alone, and the whole list is back for the validation
loop inside it (whose start and end, and each batch's start for a stop asked for, speedlab
listens to) and for everything outside it: the epoch's start and end, the fit's end, an
error's hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class UnlistedInSteps:
    """Marks a callback of speedlab's that no training step's hook calls: out of the trainer's
    callbacks while its epoch loop runs (``Unlisted``)."""


class Unlisted:
    """Wrappers for ``speedlab.measure.taps`` over the epoch loop's ``run`` (``training``) and
    the validation loop's (``validating``) of ``trainer``: each call of the first runs with
    the ``UnlistedInSteps`` callbacks out of the trainer's list, each of the second with them
    back in their places. The list is changed in place, so a callback the user's code adds or
    removes meanwhile stays added or removed; as each call ends, raising or not, speedlab's go
    back into whatever list the trainer holds then, for the hooks that follow (an error's, the
    fit's end, the teardown that takes the probe's wrappers off)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.out: list[tuple[int, Any]] | None = None  # while an epoch loop runs: (place, one)

    def training(self, run: Callable[..., Any]) -> Callable[..., Any]:
        def runs(*args: Any, **kwargs: Any) -> Any:
            out = _unlist(self.trainer.callbacks)
            if not out:  # none listed, or another probe's wrapper took them out
                return run(*args, **kwargs)
            self.out = out
            try:
                return run(*args, **kwargs)
            finally:
                _relist(self.trainer.callbacks, self.out)
                self.out = None

        return runs

    def validating(self, run: Callable[..., Any]) -> Callable[..., Any]:
        def runs(*args: Any, **kwargs: Any) -> Any:
            if self.out is None:  # validation alone, or outside the epoch loop
                return run(*args, **kwargs)
            _relist(self.trainer.callbacks, self.out)
            try:
                return run(*args, **kwargs)
            finally:
                self.out = _unlist(self.trainer.callbacks)

        return runs


def _unlist(callbacks: list[Any]) -> list[tuple[int, Any]]:
    """Takes the ``UnlistedInSteps`` callbacks out of ``callbacks``; returns them with their
    places."""
    out = [(i, c) for i, c in enumerate(callbacks) if isinstance(c, UnlistedInSteps)]
    if out:
        callbacks[:] = [c for c in callbacks if not isinstance(c, UnlistedInSteps)]
    return out


def _relist(callbacks: list[Any], out: list[tuple[int, Any]]) -> None:
    """Puts ``_unlist``'s callbacks back in their places (first to last, so each place is
    the one it had)."""
    for place, callback in out:
        callbacks.insert(place, callback)
