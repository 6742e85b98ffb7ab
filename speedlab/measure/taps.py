"""Wrappers put over methods of the trainer's own objects for the length of a fit, then taken
off: how SpeedProbe reads a step's edges from the calls Lightning's loop makes anyway.

A wrapper is an instance attribute over the class's method, so only that object sees it, and
``remove`` leaves each object as it was (an instance attribute it had before is put back).
Where another wrapper was put over one (two probes on one trainer, taken off in the order they
were put on), the one underneath is skipped when the one on top comes off.

An object's ``__dict__`` is never read: on CPython 3.11 reading it turns the object's attributes
into a dictionary that its class's attribute caches cannot use, and every attribute Lightning
then reads on it each step (a loop's, a strategy's) costs a full lookup: 87 thousand
instructions a step in all, measured under callgrind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_UNDER: dict[int, tuple[Any, Any]] = {}
"""id of a wrapper taken off while another sat on it -> (the wrapper, what it had covered);
until the one on top comes off."""


def _own_method(owner: Any, name: str, method: Any) -> bool:
    """Whether ``method`` is ``owner``'s class's own ``name``, bound to it (no instance
    attribute covered it)."""
    bound_to = getattr(method, "__self__", None)
    return bound_to is owner and getattr(method, "__func__", None) is getattr(type(owner), name)


class Taps:
    """Puts ``wrap(method)`` over methods of objects until ``remove``."""

    def __init__(self) -> None:
        self._put: list[tuple[Any, str, Any, Any]] = []

    def put(self, owner: Any, name: str, wrap: Callable[[Callable[..., Any]], Any]) -> None:
        """``owner.name`` becomes ``wrap(owner.name)``."""
        before = getattr(owner, name)
        wrapper = wrap(before)
        setattr(owner, name, wrapper)
        self._put.append((owner, name, before, wrapper))

    def unwrap(self, inner: Any) -> None:
        """``inner`` in the place of the wrapper put over it (its ``__wrapped__``), where no
        other wrapper was put over that one. Found by what it wraps: a wrapper that named
        itself would hold itself, and what it holds only the garbage collector would free."""
        for i, (owner, name, before, put) in enumerate(self._put):
            if getattr(put, "__wrapped__", None) is inner and getattr(owner, name) is put:
                setattr(owner, name, inner)
                self._put[i] = (owner, name, before, inner)

    def remove(self) -> None:
        """Every wrapper off, the last put first."""
        while self._put:
            owner, name, before, wrapper = self._put.pop()
            while _UNDER.get(id(before), (None,))[0] is before:  # taken off, under this one
                before = _UNDER.pop(id(before))[1]
            if getattr(owner, name) is not wrapper:
                _UNDER[id(wrapper)] = (wrapper, before)  # the one on top still calls it
            elif _own_method(owner, name, before):
                delattr(owner, name)
            else:
                setattr(owner, name, before)
