"""Tests for speedlab.labs.slow_storage: the throttle, in and out of worker processes and labs."""

from __future__ import annotations

import math
import pickle
import time
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from speedlab.labs import ThrottledOpener, image_lab
from speedlab.labs.images import ShapesDataset, make_shapes

SMALL = {"n": 40, "size": 32}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_shapes(tmp_path_factory.mktemp("small"), **SMALL)


def timed_read(opener: ThrottledOpener, path: Path) -> tuple[bytes, float]:
    start = time.perf_counter()
    with opener(path) as file:
        data = file.read()
    return data, time.perf_counter() - start


def test_a_read_waits_latency_plus_size_over_bandwidth(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(bytes(range(256)) * 8)  # 2048 bytes
    opener = ThrottledOpener(bytes_per_s=51_200, latency_s=0.03)
    assert opener.delay(2048) == pytest.approx(0.07)
    data, seconds = timed_read(opener, path)
    assert data == path.read_bytes()
    assert 0.07 <= seconds < 0.07 + 0.1


def test_infinite_bandwidth_leaves_only_the_latency(tmp_path: Path) -> None:
    path = tmp_path / "blob"
    path.write_bytes(b"x" * 100_000)
    _, seconds = timed_read(ThrottledOpener(bytes_per_s=math.inf, latency_s=0.02), path)
    assert 0.02 <= seconds < 0.02 + 0.1


def test_only_files_under_its_root_are_slow(tmp_path: Path) -> None:
    slow_dir, fast_dir = tmp_path / "disk", tmp_path / "shm"
    for folder in (slow_dir, fast_dir):
        folder.mkdir()
        (folder / "f").write_bytes(b"abc")
    opener = ThrottledOpener(bytes_per_s=1e6, latency_s=0.2).within(slow_dir)
    assert opener.slows(slow_dir / "f") and not opener.slows(fast_dir / "f")
    assert timed_read(opener, slow_dir / "f")[1] >= 0.2
    assert timed_read(opener, fast_dir / "f")[1] < 0.1


@pytest.mark.parametrize(
    ("kwargs", "quoted"),
    [
        ({"bytes_per_s": 0}, "bytes_per_s=0"),
        ({"bytes_per_s": -5.0}, "bytes_per_s=-5.0"),
        ({"bytes_per_s": 1e6, "latency_s": -0.1}, "latency_s=-0.1"),
        ({"bytes_per_s": 1e6, "latency_s": math.nan}, "latency_s=nan"),
    ],
)
def test_bad_settings_are_refused_quoting_the_call(kwargs: dict, quoted: str) -> None:
    with pytest.raises(ValueError, match=f"ThrottledOpener\\({quoted}\\) is not valid"):
        ThrottledOpener(**kwargs)


def test_it_pickles_by_value() -> None:
    opener = ThrottledOpener(bytes_per_s=2e6, latency_s=0.004).within("/data")
    assert pickle.loads(pickle.dumps(opener)) == opener


def test_it_throttles_inside_spawned_dataloader_workers(small: Path) -> None:
    plain = ShapesDataset(small, augment=False)
    slow = ShapesDataset(small, augment=False)
    slow.opener = ThrottledOpener(bytes_per_s=math.inf, latency_s=0.05).within(small)
    loader = DataLoader(slow, batch_size=1, num_workers=1, multiprocessing_context="spawn")
    arrivals = []
    for i, (x, y) in enumerate(loader):
        arrivals.append(time.perf_counter())
        expected_x, expected_y = plain[i]
        assert (x[0] == expected_x).all() and y.item() == expected_y
        if i == 7:
            break
    # Past the two prefetched batches, each one waits for the worker's slow read.
    assert arrivals[7] - arrivals[2] >= 5 * 0.05 * 0.9


def test_image_lab_reads_its_folder_through_the_throttle(tmp_path: Path) -> None:
    throttle = ThrottledOpener(bytes_per_s=1e6, latency_s=0.03)
    _, data = image_lab(root=tmp_path, **SMALL, throttle=throttle)
    data.setup("fit")
    folder = data.train_set.root
    assert data.train_set.opener == data.val_set.opener == throttle.within(folder)
    start = time.perf_counter()
    data.train_set.load(0)
    assert time.perf_counter() - start >= 0.03
    copy = tmp_path / "copy"
    data.train_set.relocate(copy)  # as --preload shm does: the copy is not on slow storage
    assert not data.train_set.opener.slows(data.train_set.files[0])


def test_image_lab_without_a_throttle_reads_at_full_speed(tmp_path: Path) -> None:
    _, data = image_lab(root=tmp_path, **SMALL)
    data.setup("fit")
    assert not isinstance(data.train_set.opener, ThrottledOpener)
