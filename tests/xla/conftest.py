"""Real XLA on XLA's CPU runtime (``make test-xla``: torch 2.9.0 and torch-xla 2.9.0 in a venv of
their own). Lightning refuses ``accelerator="tpu"`` where the XLA device is a CPU: the tests
declare its XLA accelerator available, in lightning.pytorch and in lightning.fabric, and then
train with a real ``Trainer(accelerator="tpu", devices=1)``. ``make test-xla`` sets
``PJRT_DEVICE=CPU``, which must be set before torch_xla is imported."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def xla_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.fabric.accelerators import XLAAccelerator as FabricXLA
    from lightning.pytorch.accelerators import XLAAccelerator

    for accelerator in (XLAAccelerator, FabricXLA):
        monkeypatch.setattr(accelerator, "is_available", staticmethod(lambda: True))
        monkeypatch.setattr(accelerator, "auto_device_count", staticmethod(lambda: 1))
