"""Taps: wrappers over an object's methods, and the object as it was once they are off."""

from __future__ import annotations

from speedlab.measure.taps import Taps


class Loop:
    def fetch(self) -> list[str]:
        return ["fetch"]


def tagged(tag: str):
    """A wrap that adds ``tag`` to what the method returns."""

    def wrap(original):
        return lambda: [*original(), tag]

    return wrap


def test_a_wrapper_wraps_that_object_only_and_comes_off() -> None:
    loop, other = Loop(), Loop()
    taps = Taps()
    taps.put(loop, "fetch", tagged("probe"))
    assert loop.fetch() == ["fetch", "probe"] and other.fetch() == ["fetch"]
    taps.remove()
    assert loop.fetch() == ["fetch"] and "fetch" not in vars(loop)


def test_an_instance_attribute_it_covered_is_put_back() -> None:
    loop = Loop()
    loop.fetch = lambda: ["the user's"]
    taps = Taps()
    taps.put(loop, "fetch", tagged("probe"))
    assert loop.fetch() == ["the user's", "probe"]
    taps.remove()
    assert loop.fetch() == ["the user's"]


def test_two_taps_come_off_in_either_order() -> None:
    for order in ("last put first", "first put first"):
        loop = Loop()
        first, second = Taps(), Taps()
        first.put(loop, "fetch", tagged("first"))
        second.put(loop, "fetch", tagged("second"))
        assert loop.fetch() == ["fetch", "first", "second"]
        for taps in (second, first) if order == "last put first" else (first, second):
            taps.remove()
        assert "fetch" not in vars(loop), order
        assert loop.fetch() == ["fetch"], order


def test_a_wrapper_gives_its_place_to_what_it_wraps_where_it_is_on_top() -> None:
    loop, covered = Loop(), Loop()
    taps, other = Taps(), Taps()

    def warming(original):
        def steady():
            return [*original(), "steady"]

        def warm():
            return [*steady(), "warm-up"]

        warm.__wrapped__ = steady
        return warm

    for each in (loop, covered):
        taps.put(each, "fetch", warming)
    other.put(covered, "fetch", tagged("other"))
    assert loop.fetch() == ["fetch", "steady", "warm-up"]
    for _, _, _, put in list(taps._put):
        taps.unwrap(put.__wrapped__)
    assert loop.fetch() == ["fetch", "steady"]
    assert covered.fetch() == ["fetch", "steady", "warm-up", "other"]  # its top still calls it
    taps.remove()
    other.remove()
    assert loop.fetch() == ["fetch"] and covered.fetch() == ["fetch"]
    assert "fetch" not in vars(loop) and "fetch" not in vars(covered)


class Guarded(Loop):
    """Reading its ``__dict__`` fails: CPython 3.11 would move its attributes into a dictionary
    its class's attribute caches cannot use (each attribute read a full lookup, every step)."""

    @property
    def __dict__(self):  # type: ignore[override]
        raise AssertionError("the object's __dict__ was read")


def test_an_objects_dict_is_never_read() -> None:
    loop = Guarded()
    taps = Taps()
    taps.put(loop, "fetch", tagged("probe"))
    assert loop.fetch() == ["fetch", "probe"]
    taps.remove()
    assert loop.fetch() == ["fetch"] and type(loop).fetch is Loop.fetch
