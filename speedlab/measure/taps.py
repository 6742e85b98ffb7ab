"""Wrappers put over methods of the trainer's own objects for the length of a fit, then taken
off: how SpeedProbe reads a step's edges from the calls Lightning's loop makes anyway.

A wrapper is an instance attribute over the class's method, so only that object sees it, and
``remove`` leaves each object as it was (an instance attribute it had before is put back).
Where another wrapper was put over one (two probes on one trainer, taken off in the order they
were put on), the one underneath is skipped when the one on top comes off.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

_ABSENT = object()

_UNDER: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
"""A wrapper taken off while another sat on it -> what it had covered."""


class Taps:
    """Puts ``wrap(method)`` over methods of objects until ``remove``."""

    def __init__(self) -> None:
        self._put: list[tuple[Any, str, Any, Any]] = []

    def put(self, owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Any]) -> None:
        """``owner.name`` becomes ``wrap(owner.name)``."""
        before = vars(owner).get(name, _ABSENT)
        wrapper = wrap(getattr(owner, name))
        setattr(owner, name, wrapper)
        self._put.append((owner, name, before, wrapper))

    def remove(self) -> None:
        """Every wrapper off, the last put first."""
        while self._put:
            owner, name, before, wrapper = self._put.pop()
            while before in _UNDER:  # taken off already, under this one
                before = _UNDER.pop(before)
            if vars(owner).get(name) is not wrapper:
                _UNDER[wrapper] = before  # still called by the one on top: it must pass calls on
            elif before is _ABSENT:
                del vars(owner)[name]
            else:
                setattr(owner, name, before)
