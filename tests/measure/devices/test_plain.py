"""speedlab.measure.devices.plain: a device speedlab knows nothing particular about is timed by the
host's clock, named by its type, never chosen, and never claims a ``--matmul`` level did nothing."""

from __future__ import annotations

from speedlab.measure.devices import PlainDevice


def test_an_unknown_device_is_synchronous_and_named_by_its_type() -> None:
    device = PlainDevice("hpu")
    assert (device.type, device.name) == ("hpu", "hpu")
    assert not device.is_available()
    assert device.timeline(5) is None and not device.asynchronous
    assert device.sync_watch(warmup=5) is None and device.memory_reserved() is None
    assert not device.pins_memory
    assert PlainDevice("mps", name="GPU").name == "GPU"


def test_what_amp_and_matmul_do_there_is_said_to_be_unknown() -> None:
    chosen, note = PlainDevice("hpu").amp()
    assert chosen == "bf16-mixed" and note.startswith("precision=amp ran as bf16-mixed on hpu")
    note, changes = PlainDevice("hpu").matmul("high")
    assert "does not know" in note and changes  # not known to change nothing: never "inert"
