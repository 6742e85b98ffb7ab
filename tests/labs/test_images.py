"""Tests for speedlab.labs.images: the JPEG shapes dataset, its DataModule and the CNN."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.nn import functional as F
from torch.utils.data import DataLoader

import speedlab.labs
from speedlab.labs.images import (
    MANIFEST,
    ShapesDataModule,
    ShapesDataset,
    default_cache_dir,
    image_lab,
    make_shapes,
)

SMALL = {"n": 40, "size": 32}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_shapes(tmp_path_factory.mktemp("small"), **SMALL)


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Relative path -> (mtime in ns, bytes) of every file under ``folder``."""
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_writes_real_jpegs_in_class_folders(tmp_path: Path) -> None:
    folder = make_shapes(tmp_path, **SMALL)
    assert folder == tmp_path / "shapes-n40-s32-q85-c4-seed0"
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["classes"] == ["circle", "square", "triangle", "cross"]
    assert manifest["counts"] == dict.fromkeys(manifest["classes"], 10)
    files = sorted(folder.glob("*/*.jpg"))
    assert len(files) == 40
    assert (folder / "cross" / "00003.jpg") in files
    for path in files:
        with Image.open(path) as image:
            assert (image.format, image.size, image.mode) == ("JPEG", (32, 32), "RGB")


def test_cache_folder_comes_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEEDLAB_CACHE", str(tmp_path / "cache"))
    assert default_cache_dir() == tmp_path / "cache"
    assert make_shapes(**SMALL) == tmp_path / "cache" / "shapes-n40-s32-q85-c4-seed0"
    monkeypatch.delenv("SPEEDLAB_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "speedlab"


def test_same_parameters_give_the_same_bytes(tmp_path: Path) -> None:
    first = make_shapes(tmp_path / "a", **SMALL)
    second = make_shapes(tmp_path / "b", **SMALL)
    other_seed = make_shapes(tmp_path / "c", **SMALL, seed=1)
    image = "circle/00000.jpg"
    assert (first / image).read_bytes() != (other_seed / image).read_bytes()
    assert {k: v[1] for k, v in snapshot(first).items()} == {
        k: v[1] for k, v in snapshot(second).items()
    }


def test_second_call_reuses_the_files(tmp_path: Path) -> None:
    folder = make_shapes(tmp_path, **SMALL)
    before = snapshot(folder)
    time.sleep(0.01)  # so that a rewrite would show in the mtimes
    assert make_shapes(tmp_path, **SMALL) == folder
    assert snapshot(folder) == before


@pytest.mark.parametrize(
    "damage",
    [
        lambda manifest: manifest.unlink(),
        lambda manifest: manifest.write_text(manifest.read_text()[:20]),
        lambda manifest: manifest.write_text(
            manifest.read_text().replace('"version": 1', '"version": 0')
        ),
    ],
    ids=["no-manifest", "truncated-manifest", "old-version"],
)
def test_unfinished_folder_is_drawn_again(tmp_path: Path, damage) -> None:
    reference = snapshot(make_shapes(tmp_path / "reference", **SMALL))
    folder = make_shapes(tmp_path, **SMALL)
    (folder / "square" / "00001.jpg").unlink()
    (folder / "stray.txt").write_text("left over")
    damage(folder / MANIFEST)
    assert make_shapes(tmp_path, **SMALL) == folder
    assert {k: v[1] for k, v in snapshot(folder).items()} == {k: v[1] for k, v in reference.items()}


def test_killed_generation_is_not_taken_for_finished(tmp_path: Path) -> None:
    """Kill a real generating process half-way: the next call must draw everything again."""
    repo = Path(speedlab.labs.__file__).parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]),
    }
    code = "import sys; from speedlab.labs.images import make_shapes; make_shapes(sys.argv[1])"
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not any(tmp_path.glob(".shapes-*.partial-*/*/*.jpg")):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait()
    folder = tmp_path / "shapes-n2000-s64-q85-c4-seed0"
    assert not (folder / MANIFEST).exists()
    assert make_shapes(tmp_path) == folder
    assert len(list(folder.glob("*/*.jpg"))) == 2000


@pytest.mark.parametrize(
    ("arg", "value"), [("n", 3), ("size", 8), ("quality", 0), ("quality", 96), ("classes", 7)]
)
def test_bad_parameters_are_refused(tmp_path: Path, arg: str, value: int) -> None:
    with pytest.raises(ValueError, match=rf"make_shapes\({arg}={value}\) is not valid"):
        make_shapes(tmp_path, **{**SMALL, arg: value})
    assert not any(tmp_path.iterdir())


def test_split_is_by_index_and_labels_follow_folders(small: Path) -> None:
    train = ShapesDataset(small, train=True)
    val = ShapesDataset(small, train=False)
    assert [p.stem for p in train.files] == [f"{i:05d}" for i in range(36)]
    assert [p.stem for p in val.files] == [f"{i:05d}" for i in range(36, 40)]
    for data in (train, val):
        assert [data.classes[data.label(i)] for i in range(len(data))] == [
            p.parent.name for p in data.files
        ]


def test_dataset_needs_a_finished_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no finished shapes dataset"):
        ShapesDataset(tmp_path)


def test_load_is_deterministic_and_augmentation_random(small: Path) -> None:
    data = ShapesDataset(small, augment=True)
    image = data.load(5)
    assert (image.dtype, image.shape) == (np.uint8, (32, 32, 3))
    assert data.load(5).tobytes() == image.tobytes()
    torch.manual_seed(0)
    augmented = [data.transform(image) for _ in range(20)]
    assert all(x.shape == (3, 32, 32) and x.dtype == torch.float32 for x in augmented)
    assert len({x.numpy().tobytes() for x in augmented}) > 10

    plain = ShapesDataset(small, augment=False)
    expected = (torch.from_numpy(np.array(image)).permute(2, 0, 1) / 255 - 0.5) / 0.25
    assert torch.allclose(plain.transform(image), expected, atol=1e-6)
    assert torch.equal(plain[5][0], plain.transform(image))
    assert plain[5][1] == plain.label(5) == 1


def documented_augmentation(pixels: np.ndarray, draws: list[float]) -> torch.Tensor:
    """The docstring's augmentation of (H, W, 3) pixels from four uniform draws, in [0, 1]."""
    flip, shift_y, shift_x, brightness = draws
    size = pixels.shape[1]
    image = torch.from_numpy(np.array(pixels)).permute(2, 0, 1).float() / 255
    pad = size // 16
    padded = F.pad(image[None], (pad, pad, pad, pad), mode="replicate")[0]
    dy, dx = int(shift_y * (2 * pad + 1)), int(shift_x * (2 * pad + 1))
    expected = padded[:, dy : dy + size, dx : dx + size]
    if flip < 0.5:
        expected = expected.flip(-1)
    return (expected * (0.75 + 0.5 * brightness)).clamp(0.0, 1.0)


def test_augmentation_is_the_documented_flip_shift_and_brightness(small: Path) -> None:
    data = ShapesDataset(small, augment=True)
    image = data.load(5)
    for seed in range(12):
        torch.manual_seed(seed)
        expected = documented_augmentation(image, torch.rand(4).tolist())
        torch.manual_seed(seed)
        assert torch.allclose(data.transform(image) * 0.25 + 0.5, expected, atol=1e-5), seed


def test_a_batch_is_augmented_image_by_image_with_its_own_draws(small: Path) -> None:
    data = ShapesDataset(small, augment=True)
    indices = [3, 0, 17, 3, 9, 30, 3, 21]
    torch.manual_seed(1)
    draws = torch.rand(len(indices), 4).tolist()
    torch.manual_seed(1)
    batch = data.__getitems__(indices)
    assert [label for _, label in batch] == [data.label(i) for i in indices]
    for (x, _), i, draw in zip(batch, indices, draws, strict=True):
        expected = documented_augmentation(data.load(i), draw)
        assert torch.allclose(x * 0.25 + 0.5, expected, atol=1e-5), i
    same_image = [x for (x, _), i in zip(batch, indices, strict=True) if i == 3]
    assert not torch.equal(same_image[0], same_image[1])  # three draws for image 3
    loader = DataLoader(data, batch_size=8)  # the DataLoader fetches through __getitems__
    x, y = next(iter(loader))
    assert x.shape == (8, 3, 32, 32) and y.tolist() == data.labels[:8]


def test_relocate_reads_from_the_new_root(small: Path, tmp_path: Path) -> None:
    data = ShapesDataset(small, augment=False)
    expected = data.load(7).tobytes()
    copy = tmp_path / "copy"
    shutil.copytree(small, copy)
    data.relocate(copy)
    assert data.root == copy
    assert data.files == sorted(copy.glob("*/*.jpg"), key=lambda p: p.stem)[:36]
    assert data.load(7).tobytes() == expected
    data.files[7].write_bytes(b"not a jpeg")
    with pytest.raises(Image.UnidentifiedImageError):
        data.load(7)


def test_opener_hook_is_used_by_load(small: Path) -> None:
    data = ShapesDataset(small)
    opened: list[Path] = []

    def counting_opener(path: Path):
        opened.append(path)
        return open(path, "rb")

    data.opener = counting_opener
    data.load(3)
    data[4]
    assert opened == [data.files[3], data.files[4]]


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_two_worker_processes_load_every_image(small: Path, context: str) -> None:
    data = ShapesDataset(small, augment=True)
    assert pickle.loads(pickle.dumps(data)).files == data.files
    loader = DataLoader(data, batch_size=8, num_workers=2, multiprocessing_context=context)
    batches = list(loader)
    assert [x.shape for x, _ in batches] == [(8, 3, 32, 32)] * 4 + [(4, 3, 32, 32)]
    assert torch.cat([y for _, y in batches]).tolist() == data.labels


def test_datamodule_builds_loaders(tmp_path: Path) -> None:
    data = ShapesDataModule(tmp_path, **SMALL, batch_size=4, num_workers=0, persistent_workers=True)
    data.prepare_data()
    data.setup("fit")
    train, val = data.train_dataloader(), data.val_dataloader()
    assert (len(train.dataset), len(val.dataset)) == (36, 4)
    assert train.dataset.augment and not val.dataset.augment
    assert (train.batch_size, train.num_workers, train.persistent_workers) == (4, 0, False)
    assert data.hparams["n"] == 40


def test_default_lab_learns(train) -> None:
    torch.manual_seed(0)
    model, data = image_lab()
    assert data.shapes == {"n": 2000, "size": 64, "quality": 85, "classes": 4, "seed": 0}
    losses, metrics = train(model, data, steps=100)
    assert len(losses) == 100
    assert statistics.median(losses[-10:]) < 0.7 * statistics.median(losses[:10])
    assert metrics["val_acc"] > 0.5  # chance is 0.25
