"""SweepStore: a run store that fails never costs a sweep what it measured; real SQLite
failures (another connection's write lock, a folder that cannot be made) around real runs."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import lightning.pytorch as pl
import pytest

import speedlab.results.store
from speedlab.api import profile_train
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.results.history import history, stored_sweep


def train() -> None:
    trainer = pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER)
    trainer.fit(KnownCostModel(step_s=0.001), known_cost_loader(n=80, batch_size=8))


def test_a_store_locked_mid_sweep_loses_no_result_and_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(speedlab.results.store, "BUSY_TIMEOUT_S", 0.2)
    path, holder = tmp_path / "runs.sqlite", []

    def train_then_lock() -> None:
        train()
        if not holder:  # another program takes the write lock as the first run ends
            holder.append(sqlite3.connect(path, isolation_level=None))
            holder[0].execute("BEGIN IMMEDIATE")

    sweep = profile_train(train_then_lock, workers=[0, 0, 0], steps=6, live=False, store=path)
    holder[0].execute("ROLLBACK")
    holder[0].close()
    assert [run.ok for run in sweep.runs] == [True, True, True]
    said = (
        f"Not stored: speedlab run store {path} is locked by another process (database is "
        "locked); try again once it has finished writing;"
    )
    assert [note for note in sweep.notes if note.startswith(said)] == [
        note for note in sweep.notes if note.startswith("Not stored")
    ]
    assert sweep.notes[-1].endswith("The sweep went on; run 1 and those after it are not stored.")
    assert capsys.readouterr().err.count("speedlab: Not stored:") == 1
    assert history(path=path) == []  # the sweep was begun, no run landed
    with pytest.raises(KeyError):  # nothing to show: it never finished and no run landed
        stored_sweep(1, path)


def test_a_store_that_cannot_be_made_leaves_the_sweep_to_run(tmp_path: Path) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    sweep = profile_train(train, steps=6, live=False, store=blocked / "runs.sqlite")
    assert sweep.runs[0].ok
    [note] = [note for note in sweep.notes if note.startswith("Not stored")]
    assert "runs.sqlite cannot be read (Not a directory)" in note
    assert note.endswith("this sweep's runs are not stored.")


def test_each_stored_run_gets_the_speedup_the_sweep_showed(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    sweep = profile_train(train, workers=[0, 0], repeat=2, steps=6, live=False, store=path)
    shown = [run.speedup for run in sweep.runs]
    assert sorted(row["speedup"] for row in history(path=path)) == sorted(shown * 2)
