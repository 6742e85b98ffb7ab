"""speedlab.labs.decoders: every decoder gives the same pixels, timed; a missing one is named."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from speedlab.labs import ShapesDataset, make_shapes
from speedlab.labs.decoders import DECODERS, NEEDS, decoder_timings


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return ShapesDataset(make_shapes(tmp_path_factory.mktemp("shapes"), n=8, size=128)).files


def test_each_usable_decoder_gives_the_same_pixels_at_the_size_asked(files: list[Path]) -> None:
    data = files[0].read_bytes()
    reference = DECODERS["Pillow, full decode then resize"][1](data, 32).astype(int)
    for name, (package, decode) in DECODERS.items():
        assert package in NEEDS
        try:
            pixels = decode(data, 32)
        except ImportError:
            continue
        assert pixels.shape == (32, 32, 3) and pixels.dtype == np.uint8, name
        assert np.abs(pixels.astype(int) - reference).mean() < 8, (
            name
        )  # scaled decodes differ a little


def test_timings_cover_every_decoder_and_name_a_missing_package(
    files: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "simplejpeg", None)  # as where it is not installed
    timings = {t.name: t for t in decoder_timings(files, 32, rounds=1)}
    assert list(timings) == list(DECODERS)
    pillow = timings["Pillow, full decode then resize"]
    assert pillow.ms_per_image is not None and pillow.ms_per_image > 0
    assert str(pillow).endswith(" ms per image")
    missing = timings["simplejpeg, decode at reduced scale"]
    assert missing.ms_per_image is None and missing.missing == "simplejpeg is not installed"
    assert "not measured here (simplejpeg is not installed)" in str(missing)
