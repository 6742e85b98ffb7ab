"""speedlab.load: a stored sweep back whole, or judged again from its runs where it never ended."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import pytest

import speedlab
from speedlab.labs import QUIET_TRAINER, KnownCostModel, known_cost_loader
from speedlab.results.findings import Finding
from speedlab.results.knobs import Knobs
from speedlab.results.store import NotStored, RunStore, StoreError
from speedlab.results.sweep import SweepResult
from tests.results.test_store import SCHEMA_1

V1 = Path(__file__).with_name("stored_v1.json")


def train() -> None:
    loader = known_cost_loader(n=8 * 40, batch_size=8, sleep_s=0.001)
    pl.Trainer(max_epochs=1, accelerator="cpu", **QUIET_TRAINER).fit(
        KnownCostModel(step_s=0.002), loader
    )


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[SweepResult, Path]:
    """A real two-run sweep, stored as it ran; and its store."""
    path = tmp_path_factory.mktemp("store") / "runs.sqlite"
    sweep = speedlab.profile_train(
        train, workers=[0, 1], steps=10, warmup=2, name="two", live=False, store=path
    )
    return sweep, path


def test_a_stored_sweep_shows_the_same_text_with_findings_and_knobs(stored) -> None:
    sweep, path = stored
    [sweep_id] = {row["sweep_id"] for row in speedlab.history(path=path)}
    loaded = speedlab.load(sweep_id, store=path)
    assert loaded is not sweep and str(loaded) == str(sweep)
    assert loaded._repr_html_() == sweep._repr_html_()
    assert [run.knobs for run in loaded.runs] == [Knobs(workers=0), Knobs(workers=1)]
    assert all(isinstance(run.knobs, Knobs) for run in loaded.runs)
    assert loaded.runs[1].knobs["workers"] == 1  # and still reads as a mapping
    findings = [*loaded.diagnosis, *(f for run in loaded.runs for f in run.diagnosis)]
    assert findings and all(isinstance(f, Finding) for f in findings)
    assert loaded.diagnosis == sweep.diagnosis
    assert loaded.best is loaded.runs[sweep.runs.index(sweep.best)]


@pytest.mark.skipif(shutil.which("taskset") is None, reason="needs taskset (util-linux)")
def test_speedlab_load_on_one_core_prints_what_the_sweep_showed(stored) -> None:
    """The verdicts were judged when the runs were measured: a process that may use one core
    (``taskset -c 0``) shows them as the machine that ran them did."""
    sweep, path = stored
    [sweep_id] = {row["sweep_id"] for row in speedlab.history(path=path)}
    env = {**os.environ, "SPEEDLAB_STORE": str(path)}
    code = "import sys; from speedlab.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code, "load", str(sweep_id)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "\n".join([str(sweep), *map(str, sweep.diagnosis)]) + "\n"


def test_a_sweep_that_never_ended_is_judged_again_from_its_runs(stored) -> None:
    sweep, path = stored
    with RunStore(path) as store:  # as a kernel that died after the runs, before the end
        crashed = store.new_sweep(name="crashed", cell_hash=None, env={})
        for position, run in enumerate(sweep.runs):
            store.add_run(crashed, position, run.to_dict())
    loaded = speedlab.load(crashed, store=path)
    assert loaded.name == "crashed"
    assert [run.knobs for run in loaded.runs] == [run.knobs for run in sweep.runs]
    assert loaded.notes[-1].startswith(
        f"Judged again when loaded: sweep {crashed} was stored without its final result"
    )
    # The same runs judged by the same rule: the table under its caption (the name) is the same.
    rows = slice(1, 3 + len(sweep.runs))
    assert str(loaded).splitlines()[rows] == str(sweep).splitlines()[rows]
    assert all(isinstance(f, Finding) for f in loaded.diagnosis)


def test_a_sweep_stored_by_speedlab_0_1_loads_from_its_runs(tmp_path: Path) -> None:
    """A store that speedlab 0.1 wrote (schema 1, runs only, knobs and findings as plain
    dicts): it is brought up to date and its sweep is judged now."""
    old = json.loads(V1.read_text())
    path = tmp_path / "runs.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_1)  # holds sweep 1 with no runs: it never got to its first
    conn.execute(
        "INSERT INTO sweeps (id, created, name, cell_hash, env_json) VALUES (2, ?, ?, ?, ?)",
        (old["sweep"]["created"], old["sweep"]["name"], None, json.dumps(old["sweep"]["env"])),
    )
    for position, run in enumerate(old["runs"]):
        conn.execute(
            "INSERT INTO runs (sweep_id, created, position, knobs_json, result_json)"
            " VALUES (2, ?, ?, ?, ?)",
            (old["sweep"]["created"], position, json.dumps(run["knobs"]), json.dumps(run)),
        )
    conn.commit()
    conn.close()
    loaded = speedlab.load(2, store=path)
    assert loaded.name == "workers, speedlab 0.1 (schema 1)"
    assert [run.knobs for run in loaded.runs] == [Knobs(workers=0), Knobs(workers=1)]
    assert [run.steps for run in loaded.runs] == [10, 10]
    assert all(isinstance(f, Finding) for run in loaded.runs for f in run.diagnosis)
    assert "Judged again when loaded: sweep 2" in loaded.notes[-1]
    # 1.97x with every step measured: beyond noise, whatever machine judges it now
    assert loaded.runs[1].samples_per_s / loaded.runs[0].samples_per_s > 1.5
    *_, baseline, workers = str(loaded.table()).splitlines()
    assert baseline.startswith("baseline") and workers.startswith("workers=1")
    assert "faster" in workers.split()
    with pytest.raises(NotStored, match=r"sweep 1 in the run store .* nothing to show"):
        speedlab.load(1, store=path)


def test_an_unknown_id_is_one_line_naming_it_and_the_store(stored, tmp_path: Path) -> None:
    _, path = stored
    with pytest.raises(KeyError) as caught:
        speedlab.load(999, store=path)
    assert str(caught.value).startswith(f"no sweep 999 in the run store {path} (its sweeps")
    missing = tmp_path / "none.sqlite"
    with pytest.raises(NotStored, match="there is no run store at"):
        speedlab.load(1, store=missing)
    assert not missing.exists()
    with pytest.raises(TypeError, match=r"load\(sweep_id='1'\): expected a sweep's number"):
        speedlab.load("1", store=path)  # type: ignore[arg-type]


def test_a_stored_result_of_a_layout_this_speedlab_does_not_read_is_one_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        sweep_id = store.new_sweep(name="future", cell_hash=None, env={})
        store.finish_sweep(sweep_id, {"format": 99, "runs": []})
    with pytest.raises(StoreError) as caught:
        speedlab.load(sweep_id, store=path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"sweep {sweep_id} in the run store {path}: ")
    assert "format 99" in message


def test_a_sweep_judged_on_medians_is_judged_again_by_todays_rule(stored, tmp_path: Path) -> None:
    """A finished sweep of format 2 (an earlier speedlab's, judged on medians): its stored
    verdicts would not agree with its figures read by today's rule, so it is judged again."""
    sweep, _ = stored
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        sweep_id = store.new_sweep(name="medians", cell_hash=None, env={})
        store.finish_sweep(sweep_id, sweep.to_dict() | {"format": 2, "notes": ["as judged then"]})
    loaded = speedlab.load(sweep_id, store=path)
    assert "as judged then" not in loaded.notes
    assert loaded.notes[-1].startswith(
        f"Judged again when loaded: sweep {sweep_id} was judged on medians by an earlier speedlab"
    )
    assert [run.speedup for run in loaded.runs] == [run.speedup for run in sweep.runs]
