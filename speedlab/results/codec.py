"""Plain data to and from the result records, by their dataclass fields and type hints.

The run store and ``to_json`` hold JSON only; a record comes back as the types it was built
with (``Knobs``, ``Finding``, ``SystemSummary``...) because each field's type hint says what to
rebuild, so no record lists its fields by hand. Keys a record does not have (written by
another version) are passed over; fields missing from the data keep their defaults.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from enum import Enum
from functools import cache
from typing import Any, TypeVar

T = TypeVar("T")


class Name(str, Enum):
    """A closed set of names (finding kinds, verdicts, phases): each member is its text, so it
    compares equal to it, formats as it, and is stored as it."""

    def __str__(self) -> str:
        return self.value


class Record:
    """A dataclass record read and written as plain data by its fields (``to_plain``)."""

    def to_dict(self) -> dict[str, Any]:
        return fields_to_plain(self)

    @classmethod
    def from_dict(cls: type[T], data: Mapping[str, Any]) -> T:
        return from_plain(cls, data)


def to_plain(value: Any) -> Any:
    """``value`` as JSON-able data: records field by field, enums by their value."""
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        own = getattr(value, "to_dict", None)
        return own() if own is not None else fields_to_plain(value)
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def fields_to_plain(record: Any) -> dict[str, Any]:
    """Every field of a dataclass instance as plain data."""
    return {f.name: to_plain(getattr(record, f.name)) for f in dataclasses.fields(record)}


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(record: Any) -> None:
    """Give a record's fields the types their hints name, where they hold plain data (in
    ``__post_init__``, frozen records included): a mapping of knobs becomes ``Knobs``."""
    hints = _hints(type(record))
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        typed = convert(hints[f.name], value)
        if typed is not value:
            object.__setattr__(record, f.name, typed)


def from_plain(cls: type[T], data: Mapping[str, Any]) -> T:
    """A ``cls`` record from plain data: each known field converted by its type hint."""
    hints = _hints(cls)
    kwargs = {
        f.name: convert(hints[f.name], data[f.name])
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.init and f.name in data
    }
    return cls(**kwargs)


def convert(hint: Any, value: Any) -> Any:
    """``value`` as the type ``hint`` names, where it is plain data of that type."""
    if value is None or hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in args if a is not type(None)]
        for option in options:  # already one of them: kept as it is
            if isinstance(option, type) and isinstance(value, option):
                return value
        return convert(options[0], value) if len(options) == 1 else value
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return tuple(convert(a, v) for a, v in zip(args, value, strict=False))
        item = args[0] if args else Any
        return origin(convert(item, v) for v in value)
    if origin in (dict, Mapping, typing.Mapping) and isinstance(value, Mapping):
        return dict(value)
    if not isinstance(hint, type) or isinstance(value, hint):
        return value
    if issubclass(hint, Enum):
        return hint(value)
    if isinstance(value, Mapping):
        own = getattr(hint, "from_dict", None)
        if own is not None:
            return own(value)
        if dataclasses.is_dataclass(hint):
            return from_plain(hint, value)
    return value
