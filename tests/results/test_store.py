"""The run store: round trips, other processes, concurrent writers, files that are not ours."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import speedlab.results.history
import speedlab.results.store
from speedlab.results.history import format_history, stored_sweep
from speedlab.results.store import (
    NotStored,
    RunStore,
    StoreError,
    default_store_path,
)

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
        "finished": False,
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
        with pytest.raises(KeyError, match="no sweep 999"):
            store.sweep(999)
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


def test_a_store_from_a_newer_speedlab_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    RunStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    data = path.read_bytes()
    with pytest.raises(StoreError) as caught:
        RunStore(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert "has run store schema 99, newer than schema 2 that this speedlab reads" in message
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
    assert header.split()[:4] == ["run", "sweep", "when", "samples/s"]
    assert set(rule) == {"-", " "}
    assert "compile=on" in newest and "boom" in newest and "second line" not in newest
    for figure in ("precision=16-mixed", "workers=4", "1234.5", "1.50x", "12.50", "37.50", "25%"):
        assert figure in oldest
    assert "0.4321" in oldest and "precision sweep" in oldest
    # The sweep column is the id that speedlab.load takes.
    assert oldest.split()[1] == newest.split()[1] == str(sweep)
    # Numbers are right-aligned under their heading.
    assert header.index("samples/s") + len("samples/s") == oldest.index("1234.5") + len("1234.5")
    assert format_history([]) == "No runs stored yet."


def test_module_history_reads_the_default_store_and_never_creates_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "runs.sqlite"
    monkeypatch.setenv("SPEEDLAB_STORE", str(target))
    assert speedlab.results.history.history() == []
    assert not target.exists()
    for bad in ("2", 2.5, True, -1):  # refused with a store or without one
        with pytest.raises(ValueError, match=rf"history\(n={bad!r}\): expected a number"):
            speedlab.results.history.history(bad)
    with RunStore() as store:
        sweep = store.new_sweep(name="s", cell_hash=None, env={})
        ids = [store.add_run(sweep, i, RUN) for i in range(3)]
    assert [row["run_id"] for row in speedlab.results.history.history(2)] == ids[:0:-1]
    assert len(speedlab.results.history.history(path=target)) == 3


def test_a_finished_sweep_keeps_its_whole_result_beside_its_runs(tmp_path: Path) -> None:
    whole = {"format": 2, "name": "workers", "runs": [RUN, RUN], "best": 1, "notes": ["n"]}
    with RunStore(tmp_path / "runs.sqlite") as store:
        sweep = store.new_sweep(name="workers", cell_hash=None, env={})
        other = store.new_sweep(name="other", cell_hash=None, env={})
        # Runs are stored as each ends, positions in the order they ran.
        store.add_run(sweep, 1, {**RUN, "steps": 2})
        store.add_run(other, 0, {**RUN, "steps": 99})
        store.add_run(sweep, 0, {**RUN, "steps": 1})
        assert store.sweep(sweep)["result"] is None
        assert [s["finished"] for s in store.sweeps()] == [False, False]
        store.finish_sweep(sweep, whole)
        stored = store.sweep(sweep)
        assert [run["steps"] for run in store.sweep_runs(sweep)] == [1, 2]
        assert [s["finished"] for s in store.sweeps()] == [False, True]
        with pytest.raises(NotStored) as caught:
            store.finish_sweep(7, whole)
    assert stored["result"] == whole and stored["runs"] == 2 and stored["name"] == "workers"
    message = str(caught.value)
    assert message == (
        f"no sweep 7 in the run store {tmp_path / 'runs.sqlite'} (its sweeps are numbered 1 to 2)"
    )  # one line, unquoted though a KeyError
    assert isinstance(caught.value, KeyError)
    # JSON text only: what is read back is parsed, never unpickled or run.
    conn = sqlite3.connect(tmp_path / "runs.sqlite")
    [(text,)] = conn.execute("SELECT result_json FROM sweeps WHERE id = ?", (sweep,))
    conn.close()
    assert json.loads(text) == whole


def test_stored_sweep_reads_without_creating_a_store(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with pytest.raises(NotStored, match=f"no sweep 3: there is no run store at {path} yet"):
        stored_sweep(3, path)
    assert not path.exists()
    with RunStore(path) as store:
        empty = store.new_sweep(name="crashed at once", cell_hash=None, env={})
        unfinished = store.new_sweep(name="crashed later", cell_hash=None, env={})
        store.add_run(unfinished, 0, RUN)
        finished = store.new_sweep(name="done", cell_hash=None, env={})
        store.add_run(finished, 0, RUN)
        store.finish_sweep(finished, {"runs": [RUN]})
    with pytest.raises(NotStored, match=f"sweep {empty} in the run store .* nothing to show"):
        stored_sweep(empty, path)
    assert stored_sweep(unfinished, path)["run_dicts"] == [RUN]
    entry = stored_sweep(finished, path)
    assert entry["result"] == {"runs": [RUN]} and entry["run_dicts"] == []
    assert entry["path"] == str(path)


# The schema that speedlab 0.1 wrote, as it was: no sweep kept its whole result.
SCHEMA_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sweeps (
    id INTEGER PRIMARY KEY, created TEXT NOT NULL, name TEXT, cell_hash TEXT,
    env_json TEXT NOT NULL
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
    created TEXT NOT NULL, position INTEGER NOT NULL, knobs_json TEXT NOT NULL,
    samples_per_s REAL, data_time REAL, batch_time REAL, step_time REAL, data_share REAL,
    speedup REAL, steps INTEGER, samples INTEGER, final_loss REAL, error TEXT,
    result_json TEXT NOT NULL
);
CREATE INDEX runs_by_sweep ON runs(sweep_id, position);
INSERT INTO meta VALUES ('app', 'speedlab'), ('schema_version', '1');
INSERT INTO sweeps VALUES (1, '2025-01-01T10:00:00+00:00', 'old', NULL, '{}');
PRAGMA application_id = 1397769292;
PRAGMA user_version = 1;
"""


def store_of_schema_1(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA_1)
    conn.execute(
        "INSERT INTO runs (sweep_id, created, position, knobs_json, steps, result_json)"
        " VALUES (1, '2025-01-01T10:00:05+00:00', 0, ?, 40, ?)",
        (json.dumps(RUN["knobs"]), json.dumps(RUN)),
    )
    conn.commit()
    conn.close()


def test_a_store_of_schema_1_is_brought_up_to_date_in_place(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    store_of_schema_1(path)
    assert speedlab.results.store.APPLICATION_ID == 1397769292
    with RunStore(path) as store:
        [row] = store.history()
        assert row["sweep_id"] == 1 and row["sweep"] == "old" and row["knobs"] == RUN["knobs"]
        assert store.sweep(1)["result"] is None  # it never kept one: load judges its runs
        assert store.sweep_runs(1) == [RUN]
        new = store.new_sweep(name="new", cell_hash=None, env={})
        store.finish_sweep(new, {"runs": []})
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    assert dict(conn.execute("SELECT key, value FROM meta"))["schema_version"] == "2"
    conn.close()
    with RunStore(path) as store:  # and opens again as a store of this schema
        assert [s["finished"] for s in store.sweeps()] == [True, False]


def test_a_store_that_cannot_be_brought_up_to_date_is_refused_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A step that fails, as a read-only file's would (root may write any file, so that case
    # cannot be made here).
    monkeypatch.setitem(
        speedlab.results.store.MIGRATIONS,
        1,
        ("ALTER TABLE sweeps ADD COLUMN result_json TEXT", "ALTER TABLE gone ADD COLUMN x"),
    )
    path = tmp_path / "runs.sqlite"
    store_of_schema_1(path)
    data = path.read_bytes()
    with pytest.raises(StoreError) as caught:
        RunStore(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message
    assert "has run store schema 1 and could not be brought up to schema 2" in message
    assert path.read_bytes() == data  # the first step was rolled back with the second
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    conn.close()


def _held(path: Path) -> sqlite3.Connection:
    """Another process's connection holding the store's write lock, as a writer does."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def test_reading_takes_no_write_lock_and_a_writer_waiting_for_one_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        sweep = store.new_sweep(name="held", cell_hash=None, env={})
        store.add_run(sweep, 0, RUN)
    writer = _held(path)
    start = time.monotonic()
    rows = speedlab.results.history.history(path=path)
    entry = stored_sweep(sweep, path)
    waited = time.monotonic() - start
    assert [row["sweep"] for row in rows] == ["held"] and entry["run_dicts"] == [RUN]
    assert waited < speedlab.results.store.BUSY_TIMEOUT_S / 6  # read at once, not waited for
    monkeypatch.setattr(speedlab.results.store, "BUSY_TIMEOUT_S", 0.2)
    with RunStore(path, read_only=True) as store, pytest.raises(StoreError) as caught:
        store.add_run(sweep, 1, RUN)  # a reader cannot write
    with pytest.raises(StoreError) as locked:
        RunStore(path).add_run(sweep, 1, RUN)
    writer.execute("ROLLBACK")
    writer.close()
    assert "cannot be written here (attempt to write a readonly database)" in str(caught.value)
    assert "is locked by another process (database is locked)" in str(locked.value)


def test_a_store_damaged_past_its_schema_is_one_line_from_every_reader(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as store:
        sweep = store.new_sweep(name="a" * 5000, cell_hash=None, env={})
        for position in range(40):
            store.add_run(sweep, position, {**RUN, "notes": ["n" * 2000]})
    data = bytearray(path.read_bytes())
    page = 4096
    data[3 * page : 12 * page] = bytes(range(256)) * (9 * page // 256)  # the runs' pages
    path.write_bytes(bytes(data))
    for read in (
        lambda: speedlab.results.history.history(path=path),
        lambda: stored_sweep(sweep, path),
    ):
        with pytest.raises(StoreError) as caught:
            read()
        assert "\n" not in str(caught.value)
        assert f"speedlab run store {path} is a damaged SQLite database (" in str(caught.value)


def test_the_judged_speedups_fill_the_history_and_odd_values_are_kept_as_text(
    tmp_path: Path,
) -> None:
    class Callback:
        def __repr__(self) -> str:
            return "Callback()"

    with RunStore(tmp_path / "runs.sqlite") as store:
        sweep = store.new_sweep(name="s", cell_hash=None, env={})
        for position in range(3):
            store.add_run(sweep, position, {**RUN, "speedup": None})
        odd = store.add_run(sweep, 3, {**RUN, "knobs": {"trainer": {"callbacks": [Callback()]}}})
        store.finish_sweep(sweep, {"runs": []}, {0: 1.0, 1: 1.5, 2: None})
        assert [row["speedup"] for row in store.history()] == [1.5, None, 1.5, 1.0]
        assert store.run(odd)["knobs"] == {"trainer": {"callbacks": ["Callback()"]}}
