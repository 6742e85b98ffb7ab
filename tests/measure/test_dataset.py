"""Tests for speedlab.measure.dataset: the fingerprint of real JPEG datasets, on slow storage
and off it, and what it leaves alone (the random state, the throttle's time)."""

from __future__ import annotations

import io
import math
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader, Subset, TensorDataset

from speedlab.labs import ThrottledOpener
from speedlab.labs.images import ShapesDataset, make_shapes
from speedlab.measure.dataset import SAMPLES, fingerprint, jpeg_quality
from speedlab.run.preload import preload

SLOW = ThrottledOpener(bytes_per_s=math.inf, latency_s=0.02)


def shapes(root: Path, *, throttle: ThrottledOpener | None = SLOW, **params) -> ShapesDataset:
    folder = make_shapes(root, **{"n": 40, "size": 32, **params})
    dataset = ShapesDataset(folder)
    if throttle is not None:
        dataset.opener = throttle.within(folder)
    return dataset


def test_the_same_data_gives_the_same_fingerprint_and_says_what_it_is(tmp_path: Path) -> None:
    first, again = fingerprint(shapes(tmp_path)), fingerprint(shapes(tmp_path))
    assert first == again
    assert first["storage"] == "ThrottledOpener(bytes_per_s=inf, latency_s=0.02)"
    assert (first["image_size"], first["image_mode"], first["jpeg_quality"]) == ("32x32", "RGB", 85)
    assert first["sample"] == "float32[3, 32, 32], int"
    assert (first["dataset"], first["length"]) == ("ShapesDataset", 36)


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        ({"throttle": None}, "storage", "open_binary"),
        ({"throttle": ThrottledOpener(bytes_per_s=1e9, latency_s=0.001)}, "storage", None),
        ({"size": 48}, "image_size", "48x48"),
        ({"quality": 50}, "jpeg_quality", 50),
        ({"seed": 1}, "file_hash", None),
    ],
)
def test_a_changed_storage_image_size_quality_or_image_is_seen(
    tmp_path: Path, change: dict, field: str, value: object
) -> None:
    before, after = fingerprint(shapes(tmp_path)), fingerprint(shapes(tmp_path, **change))
    assert after[field] != before[field]
    if value is not None:
        assert after[field] == value
    if field != "storage":  # what the model gets changed too
        assert after["sample_hash"] != before["sample_hash"]


def test_a_changed_transform_is_seen_in_the_samples(tmp_path: Path) -> None:
    plain = shapes(tmp_path)
    plain.augment = False
    before, after = fingerprint(shapes(tmp_path)), fingerprint(plain)
    assert after["file_hash"] == before["file_hash"]
    assert after["sample_hash"] != before["sample_hash"]


def test_how_the_data_travels_leaves_it_unchanged(tmp_path: Path) -> None:
    dataset = shapes(tmp_path)
    expected = fingerprint(dataset)
    loader = DataLoader(dataset, batch_size=4, num_workers=2, pin_memory=False)
    assert fingerprint(loader.dataset) == expected
    preloaded = preload("ram", dataset)  # decoded once; augmentation still runs every step
    assert fingerprint(preloaded.dataset) == expected
    subset = fingerprint(Subset(dataset, range(len(dataset))))
    assert {k: v for k, v in subset.items() if k != "dataset"} == {
        k: v for k, v in expected.items() if k != "dataset"
    }


def test_it_is_cheap_and_leaves_the_random_state_alone(tmp_path: Path) -> None:
    dataset = shapes(tmp_path)
    fingerprint(dataset)  # imports done
    state = torch.get_rng_state()
    start = time.perf_counter()
    fingerprint(dataset)
    seconds = time.perf_counter() - start
    assert torch.equal(torch.get_rng_state(), state)
    # SAMPLES samples through the throttle; the files' bytes are read around it
    assert SAMPLES * SLOW.latency_s <= seconds < SAMPLES * SLOW.latency_s + 0.5


class _DrawsEverywhere(torch.utils.data.Dataset):
    """Augmentation from Python's and NumPy's random numbers, as many pipelines draw it."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i + random.random(), float(np.random.rand())])


def test_augmentation_from_python_and_numpy_is_seeded_and_their_states_left_alone() -> None:
    """The same data gives the same fingerprint whatever the random states before it, and the
    cell's next draws are those it would have made."""
    dataset = _DrawsEverywhere()
    random.seed(1)
    np.random.seed(1)
    first = fingerprint(dataset)
    states = random.getstate(), np.random.get_state()[1].copy()
    assert fingerprint(dataset) == first
    assert random.getstate() == states[0] and (np.random.get_state()[1] == states[1]).all()


def test_a_dataset_of_tensors_has_samples_but_no_storage() -> None:
    found = fingerprint(TensorDataset(torch.arange(12.0).view(6, 2), torch.arange(6)))
    assert found["sample"] == "float32[2], int64[]"
    assert "storage" not in found and "file_hash" not in found


def test_a_dataset_that_cannot_be_read_is_described_not_raised() -> None:
    class Broken(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> int:
            raise OSError("gone")

    assert fingerprint(Broken())["sample"] == "unreadable (OSError)"


@pytest.mark.parametrize("quality", [5, 30, 50, 75, 85, 95])
def test_jpeg_quality_is_read_back_from_pillows_tables(quality: int) -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (16, 16)).save(buffer, format="JPEG", quality=quality)
    with Image.open(buffer) as image:
        assert jpeg_quality(image.quantization[0]) == quality
    assert jpeg_quality([1] * 63 + [2]) is None
