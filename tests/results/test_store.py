"""The run store: round trips, other processes, concurrent writers, files that are not ours."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import speedlab.results.store
from speedlab.results.store import RunStore, StoreError, default_store_path, format_history

REPO = Path(speedlab.results.store.__file__).resolve().parents[2]

RUN = {
    "knobs": {"precision": "16-mixed", "workers": 4},
    "samples_per_s": 1234.5,
    "data_time": 0.0125,
    "batch_time": 0.0375,
    "step_time": 0.05,
    "data_share": 0.25,
    "speedup": 1.5,
    "steps": 40,
    "samples": 2560,
    "final_loss": 0.4321,
    "error": None,
    "records": {"data_time": [0.01, 0.02], "batch_time": [0.03, 0.04]},
    "phases": {"setup": 0.5, "warmup": 0.2},
    "system": {"cpu_percent": 80.0, "peak_rss_bytes": 123456789},
    "notes": ["pin_memory has no effect without a GPU."],
}


def run_python(code: str, *args: str) -> subprocess.Popen[str]:
    """Start `python -c code args` with this checkout importable."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "runs.sqlite"
    with RunStore(path) as store:
        sweep = store.new_sweep(name="workers", cell_hash="abc123", env={"cores": 2})
        run_id = store.add_run(sweep, 0, RUN)
        assert store.run(run_id) == RUN
        [row] = store.history()
        [sweep_row] = store.sweeps()
    assert path.is_file()
    assert row["run_id"] == run_id and row["sweep_id"] == sweep
    assert row["sweep"] == "workers" and row["cell_hash"] == "abc123" and row["position"] == 0
    assert row["knobs"] == {"precision": "16-mixed", "workers": 4}
    for key in ("samples_per_s", "data_time", "batch_time", "step_time", "data_share", "speedup"):
        assert row[key] == pytest.approx(RUN[key])
    assert (row["steps"], row["samples"], row["error"]) == (40, 2560, None)
    assert row["final_loss"] == pytest.approx(0.4321)
    assert row["created"][:4].isdigit() and "T" in row["created"]
    assert sweep_row == {
        "sweep_id": sweep,
        "created": sweep_row["created"],
        "name": "workers",
        "cell_hash": "abc123",
        "env": {"cores": 2},
        "runs": 1,
    }


def test_missing_figures_are_null_and_failed_runs_keep_their_error(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as store:
        sweep = store.new_sweep(name=None, cell_hash=None, env={})
        store.add_run(sweep, 0, {"knobs": {}, "error": "RuntimeError: CUDA out of memory"})
        store.add_run(sweep, 1, {"knobs": {"workers": 2}, "final_loss": math.nan})
        failed, nan_loss = reversed(store.history())
    assert failed["error"] == "RuntimeError: CUDA out of memory"
    assert failed["samples_per_s"] is None and failed["steps"] is None
    assert nan_loss["final_loss"] is None  # SQLite stores NaN as NULL


def test_history_is_newest_first_and_limited(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as store:
        first = store.new_sweep(name="a", cell_hash=None, env={})
        second = store.new_sweep(name="b", cell_hash=None, env={})
        ids = [store.add_run(first, i, {**RUN, "steps": i}) for i in range(3)]
        ids.append(store.add_run(second, 0, RUN))
        assert [row["run_id"] for row in store.history()] == ids[::-1]
        assert [row["run_id"] for row in store.history(2)] == ids[:1:-1]
        assert store.history(0) == []
        assert [s["name"] for s in store.sweeps()] == ["b", "a"]
        assert [s["runs"] for s in store.sweeps(1)] == [1]
        with pytest.raises(KeyError, match="no run 999"):
            store.run(999)
        with pytest.raises(ValueError, match="history"):
            store.history(-1)


def test_survives_a_new_process(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    writer = run_python(
        """
        import json, sys
        from speedlab.results.store import RunStore
        with RunStore(sys.argv[1]) as store:
            sweep = store.new_sweep(name="from child", cell_hash="c0ffee", env={"pid": 1})
            print(store.add_run(sweep, 0, json.loads(sys.argv[2])))
        assert "torch" not in sys.modules and "lightning" not in sys.modules
        """,
        str(path),
        json.dumps(RUN),
    )
    run_id = int(finish(writer))
    with RunStore(path) as store:
        assert store.run(run_id) == RUN
        assert store.history()[0]["sweep"] == "from child"


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "fresh" / "runs.sqlite"  # both processes also create the store at once
    code = """
        import sys
        from speedlab.results.store import RunStore
        with RunStore(sys.argv[1]) as store:
            sweep = store.new_sweep(name=sys.argv[2], cell_hash=None, env={})
            for i in range(50):
                store.add_run(sweep, i, {"knobs": {"writer": sys.argv[2]}, "steps": i})
        """
    writers = [run_python(code, str(path), name) for name in ("w1", "w2")]
    for writer in writers:
        finish(writer)
    with RunStore(path) as store:
        rows = store.history()
    assert len(rows) == 100
    for name in ("w1", "w2"):
        steps = sorted(row["steps"] for row in rows if row["sweep"] == name)
        assert steps == list(range(50))
        assert all(row["knobs"] == {"writer": name} for row in rows if row["sweep"] == name)


def test_random_bytes_are_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    data = os.urandom(8192)
    path.write_bytes(data)
    with pytest.raises(StoreError) as caught:
        RunStore(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and "not an SQLite database" in message
    assert "SPEEDLAB_STORE" in message
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.sqlite"]


def test_another_apps_database_is_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO runs (name) VALUES ('not ours')")
    conn.commit()
    conn.close()
    data = path.read_bytes()
    with pytest.raises(StoreError) as caught:
        RunStore(path)
    message = str(caught.value)
    assert "\n" not in message
    assert str(path) in message and "another application's SQLite database" in message
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_a_store_from_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    RunStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    data = path.read_bytes()
    with pytest.raises(StoreError, match="schema 99"):
        RunStore(path)
    assert path.read_bytes() == data


def test_an_empty_file_becomes_a_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    path.touch()
    with RunStore(path) as store:
        store.new_sweep(name="x", cell_hash=None, env={})
        assert len(store.sweeps()) == 1
    conn = sqlite3.connect(path)
    assert (
        conn.execute("PRAGMA application_id").fetchone()[0] == speedlab.results.store.APPLICATION_ID
    )
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert dict(conn.execute("SELECT key, value FROM meta")) == {
        "app": "speedlab",
        "schema_version": str(speedlab.results.store.SCHEMA_VERSION),
    }
    conn.close()


def test_a_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a folder"):
        RunStore(tmp_path)


def test_env_var_overrides_the_default_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPEEDLAB_STORE", raising=False)
    assert default_store_path() == tmp_path / ".speedlab" / "runs.sqlite"
    target = tmp_path / "elsewhere" / "mine.sqlite"
    monkeypatch.setenv("SPEEDLAB_STORE", str(target))
    assert default_store_path() == target
    with RunStore() as store:
        store.new_sweep(name="env", cell_hash=None, env={})
    assert target.is_file()
    assert not (tmp_path / ".speedlab").exists()


def test_format_history_shows_the_figures(tmp_path: Path) -> None:
    with RunStore(tmp_path / "runs.sqlite") as store:
        sweep = store.new_sweep(name="precision sweep", cell_hash=None, env={})
        store.add_run(sweep, 0, RUN)
        store.add_run(sweep, 1, {"knobs": {"compile": "on"}, "error": "boom\nsecond line"})
        text = format_history(store.history())
    header, rule, newest, oldest = text.splitlines()
    assert header.split()[:3] == ["run", "when", "samples/s"]
    assert set(rule) == {"-", " "}
    assert "compile=on" in newest and "boom" in newest and "second line" not in newest
    for figure in ("precision=16-mixed", "workers=4", "1234.5", "1.50x", "12.50", "37.50", "25%"):
        assert figure in oldest
    assert "0.4321" in oldest and "precision sweep" in oldest
    # Numbers are right-aligned under their heading.
    assert header.index("samples/s") + len("samples/s") == oldest.index("1234.5") + len("1234.5")
    assert format_history([]) == "No runs stored yet."


def test_module_history_reads_the_default_store_and_never_creates_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "runs.sqlite"
    monkeypatch.setenv("SPEEDLAB_STORE", str(target))
    assert speedlab.results.store.history() == []
    assert not target.exists()
    with RunStore() as store:
        sweep = store.new_sweep(name="s", cell_hash=None, env={})
        ids = [store.add_run(sweep, i, RUN) for i in range(3)]
    assert [row["run_id"] for row in speedlab.results.store.history(2)] == ids[:0:-1]
    assert len(speedlab.results.store.history(path=target)) == 3
