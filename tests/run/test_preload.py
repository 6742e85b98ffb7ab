"""speedlab.run.preload: what --preload ram refuses, and why, in figures."""

from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest

from speedlab.run.preload import PreloadError, preload_ram


class Sized:
    """A sample that says it takes 9 MB."""

    nbytes = 9_000_000


class NineGigabytes:
    """1000 samples of 9 MB: 9 GB in all."""

    def __len__(self) -> int:
        return 1000

    def __getitem__(self, i: int) -> Sized:
        return Sized()


def test_preload_ram_refusal_states_the_limit_it_applies(monkeypatch) -> None:
    """9 GB fits in the 10 GB available, but not in the 80% of it speedlab allows: the message
    says so, rather than 'only 10 GB available'."""
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=10e9))
    with pytest.raises(PreloadError) as info:
        preload_ram(NineGigabytes())
    assert str(info.value) == (
        "--preload ram: 1000 samples need about 9.00 GB, more than the 8.00 GB speedlab allows "
        "(80% of the 10.00 GB of RAM available). Use --preload off, or fewer or smaller samples."
    )
    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=12e9))
    assert len(preload_ram(NineGigabytes()).dataset) == 1000  # 9 GB under 9.6 GB: it preloads
