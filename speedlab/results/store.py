"""The run history: every sweep and run, kept in an SQLite file as JSON text and numbers.

Runs are written as each one ends, so a crash or a kernel restart loses nothing measured; when
a sweep ends, its whole result (runs, verdicts, findings, notes) is kept beside them, so it can
be shown again exactly as it was. Nothing stored is ever unpickled or executed. A file that is
not a speedlab store (another application's database, random bytes) is refused and left exactly
as it was; a store from an earlier speedlab is brought up to this schema in place.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from speedlab.results.table import Table, fmt

ENV_VAR = "SPEEDLAB_STORE"
APPLICATION_ID = int.from_bytes(b"SPDL", "big")  # PRAGMA application_id marking our files
SCHEMA_VERSION = 2  # PRAGMA user_version
# How to bring a store of an earlier schema up to the next one, in the same transaction that
# checks its version; each step only adds. Schema 2: the sweep's whole result when it ends.
MIGRATIONS = {
    1: ("ALTER TABLE sweeps ADD COLUMN result_json TEXT",),
}
BUSY_TIMEOUT_S = 30.0  # how long a writer waits for another process's write to finish
WAL_RETRY_S = 0.005  # between asks to switch to WAL where SQLite would not wait (_set_wal)
SQLITE_MAGIC = b"SQLite format 3\x00"

# The run figures that get their own columns (the whole run is also kept as JSON).
FIGURES = (
    "samples_per_s",
    "data_time",
    "batch_time",
    "step_time",
    "data_share",
    "speedup",
    "steps",
    "samples",
    "final_loss",
    "error",
)

SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE sweeps (
    id INTEGER PRIMARY KEY,
    created TEXT NOT NULL,
    name TEXT,
    cell_hash TEXT,
    env_json TEXT NOT NULL,
    result_json TEXT
);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
    created TEXT NOT NULL,
    position INTEGER NOT NULL,
    knobs_json TEXT NOT NULL,
    samples_per_s REAL,
    data_time REAL,
    batch_time REAL,
    step_time REAL,
    data_share REAL,
    speedup REAL,
    steps INTEGER,
    samples INTEGER,
    final_loss REAL,
    error TEXT,
    result_json TEXT NOT NULL
);
CREATE INDEX runs_by_sweep ON runs(sweep_id, position);
INSERT INTO meta VALUES ('app', 'speedlab'), ('schema_version', '{SCHEMA_VERSION}');
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""


class StoreError(Exception):
    """The run store file cannot be used; the message names the file and what to do."""


class NotStored(KeyError):
    """A sweep or run id the store does not hold; the message (one line) names the id and the
    store. A KeyError, so ``except KeyError`` catches it, that prints without quotes."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def default_store_path() -> Path:
    """`$SPEEDLAB_STORE` if set, else `.speedlab/runs.sqlite` in the current folder."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else Path.cwd() / ".speedlab" / "runs.sqlite"


class RunStore:
    """The SQLite run history. Several processes may write to one file at once.

    Args:
        path: the database file (created with its folder if missing); default
            `default_store_path()`.

    Example::

        with RunStore() as store:
            sweep = store.new_sweep(name="workers", cell_hash=None, env=system_info())
            store.add_run(sweep, 0, run_result.to_dict())  # as each run ends
            store.finish_sweep(sweep, sweep_result.to_dict())  # when the sweep ends
            print(format_history(store.history(10)))
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        _refuse_non_sqlite(self.path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise _error(self.path, f"cannot be opened ({exc})") from exc
        try:
            self._init_schema()
            # After the check, so a foreign database's journal mode is never changed.
            self._set_wal()
            self._conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            self._conn.close()
            raise

    def _set_wal(self) -> None:
        """WAL journal mode, which lets readers and a writer work at once. Switching to it takes
        the file's exclusive lock, and where another process opening the store at that moment
        holds a lock while waiting for this one's, SQLite answers "database is locked" at once
        rather than wait BUSY_TIMEOUT_S into a deadlock: two processes creating a store together
        met it in 1 to 3 pairs of 400. The other goes on and lets go, so the switch is asked
        again until then, within BUSY_TIMEOUT_S."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(WAL_RETRY_S)

    def _init_schema(self) -> None:
        """Create the schema in an empty file, or check that the file is ours (bringing a store
        of an earlier schema up to this one); never alter others.

        The check runs under the write lock, so two processes creating or updating the store at
        once agree.
        """
        try:
            with self._transaction() as conn:
                app_id = conn.execute("PRAGMA application_id").fetchone()[0]
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
                if app_id == 0 and tables == 0:
                    for statement in SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                elif app_id != APPLICATION_ID:
                    raise _error(
                        self.path,
                        f"is another application's SQLite database (application_id {app_id}, "
                        f"{tables} schema objects)",
                    )
                elif version > SCHEMA_VERSION:
                    raise _error(
                        self.path,
                        f"has run store schema {version}, newer than schema {SCHEMA_VERSION} "
                        "that this speedlab reads (a newer speedlab wrote it)",
                    )
                elif version in MIGRATIONS:
                    self._migrate(conn, version)
                elif version != SCHEMA_VERSION:
                    raise _error(
                        self.path,
                        f"has run store schema {version}, which this speedlab cannot read (it "
                        f"reads schema {min(MIGRATIONS)} to {SCHEMA_VERSION})",
                    )
        except sqlite3.DatabaseError as exc:
            raise _error(self.path, f"is a damaged SQLite database ({exc})") from exc

    def _migrate(self, conn: sqlite3.Connection, version: int) -> None:
        """Bring a store of an earlier schema up to this one, inside the caller's transaction;
        one that cannot be changed (a read-only file) is refused in one line."""
        try:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute(
                "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),)
            )
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise _error(
                self.path,
                f"has run store schema {version} and could not be brought up to schema "
                f"{SCHEMA_VERSION}, which this speedlab reads ({exc})",
            ) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taking the write lock at once (waits up to BUSY_TIMEOUT_S)."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def new_sweep(self, *, name: str | None, cell_hash: str | None, env: dict[str, Any]) -> int:
        """Record a new sweep; returns its id."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO sweeps (created, name, cell_hash, env_json) VALUES (?, ?, ?, ?)",
                (_now(), name, cell_hash, json.dumps(env)),
            )
        return _rowid(cursor)

    def add_run(self, sweep_id: int, position: int, run: dict[str, Any]) -> int:
        """Record one run (a RunResult's `to_dict()`); returns its id.

        The whole dict is kept as JSON; its headline figures also go into columns, and a
        missing one is stored as NULL.
        """
        result_json = json.dumps(run)
        figures = [run.get(key) for key in FIGURES]
        with self._transaction() as conn:
            cursor = conn.execute(
                f"INSERT INTO runs (sweep_id, created, position, knobs_json, {', '.join(FIGURES)},"
                f" result_json) VALUES ({', '.join('?' * (len(FIGURES) + 5))})",
                (
                    sweep_id,
                    _now(),
                    position,
                    json.dumps(run.get("knobs") or {}),
                    *figures,
                    result_json,
                ),
            )
        return _rowid(cursor)

    def finish_sweep(self, sweep_id: int, sweep: dict[str, Any]) -> None:
        """Keep the sweep's whole result (a SweepResult's ``to_dict()``) when it has ended.

        Its runs were stored one by one as each ended; this is what ``load`` shows again.
        """
        text = json.dumps(sweep)
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE sweeps SET result_json = ? WHERE id = ?", (text, sweep_id)
            )
        if cursor.rowcount == 0:
            raise self._no_sweep(sweep_id)

    def sweep(self, sweep_id: int) -> dict[str, Any]:
        """One sweep as ``sweeps()`` lists it, with ``result``: the dict ``finish_sweep`` kept,
        or None for a sweep that never finished (a crash, an interrupted kernel, an earlier
        speedlab); its runs are then in ``sweep_runs``."""
        row = self._conn.execute(
            "SELECT sweeps.id, sweeps.created, sweeps.name, sweeps.cell_hash, sweeps.env_json,"
            " (SELECT count(*) FROM runs WHERE runs.sweep_id = sweeps.id), sweeps.result_json"
            " FROM sweeps WHERE sweeps.id = ?",
            (sweep_id,),
        ).fetchone()
        if row is None:
            raise self._no_sweep(sweep_id)
        entry = _sweep_entry(row[:-1])
        entry["result"] = json.loads(row[-1]) if row[-1] is not None else None
        return entry

    def sweep_runs(self, sweep_id: int) -> list[dict[str, Any]]:
        """The full dicts of a sweep's stored runs, in the order they ran."""
        self.sweep(sweep_id)  # an unknown id is an error, not an empty sweep
        rows = self._conn.execute(
            "SELECT result_json FROM runs WHERE sweep_id = ? ORDER BY position, id", (sweep_id,)
        ).fetchall()
        return [json.loads(text) for (text,) in rows]

    def _no_sweep(self, sweep_id: int) -> NotStored:
        last = self._conn.execute("SELECT max(id) FROM sweeps").fetchone()[0]
        held = f"its sweeps are numbered 1 to {last}" if last else "it holds no sweeps yet"
        return NotStored(f"no sweep {sweep_id} in the run store {self.path} ({held})")

    def history(self, n: int | None = None) -> list[dict[str, Any]]:
        """The last `n` runs (all if None), newest first, with their sweep's name and cell."""
        rows = self._conn.execute(
            "SELECT runs.id, runs.sweep_id, sweeps.name, runs.created, sweeps.cell_hash,"
            " runs.position, runs.knobs_json,"
            f" {', '.join('runs.' + key for key in FIGURES)}"
            " FROM runs JOIN sweeps ON sweeps.id = runs.sweep_id"
            " ORDER BY runs.id DESC LIMIT ?",
            (_limit(n),),
        ).fetchall()
        names = ("run_id", "sweep_id", "sweep", "created", "cell_hash", "position", "knobs")
        history = []
        for row in rows:
            entry = dict(zip((*names, *FIGURES), row, strict=True))
            entry["knobs"] = json.loads(entry["knobs"])
            history.append(entry)
        return history

    def run(self, run_id: int) -> dict[str, Any]:
        """The full dict stored for a run."""
        row = self._conn.execute("SELECT result_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotStored(f"no run {run_id} in the run store {self.path}")
        return json.loads(row[0])

    def sweeps(self, n: int | None = None) -> list[dict[str, Any]]:
        """The last `n` sweeps (all if None), newest first, with their number of runs and
        whether they finished (their whole result is kept)."""
        rows = self._conn.execute(
            "SELECT sweeps.id, sweeps.created, sweeps.name, sweeps.cell_hash, sweeps.env_json,"
            " (SELECT count(*) FROM runs WHERE runs.sweep_id = sweeps.id),"
            " sweeps.result_json IS NOT NULL"
            " FROM sweeps ORDER BY sweeps.id DESC LIMIT ?",
            (_limit(n),),
        ).fetchall()
        return [_sweep_entry(row[:-1]) | {"finished": bool(row[-1])} for row in rows]

    def close(self) -> None:
        """Close the connection. Safe to call twice."""
        self._conn.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _sweep_entry(row: tuple[Any, ...]) -> dict[str, Any]:
    sweep_id, created, name, cell_hash, env_json, runs = row
    return {
        "sweep_id": sweep_id,
        "created": created,
        "name": name,
        "cell_hash": cell_hash,
        "env": json.loads(env_json),
        "runs": runs,
    }


def _refuse_non_sqlite(path: Path) -> None:
    """Raise StoreError for an existing file that is not an SQLite database, before SQLite
    touches it. A missing or empty file is fine: it becomes a new store."""
    if path.is_dir():
        raise _error(path, "is a folder, not a run store file")
    try:
        with path.open("rb") as file:
            head = file.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise _error(path, f"cannot be read ({exc.strerror})") from exc
    if head and head != SQLITE_MAGIC:
        raise _error(path, "is not an SQLite database")


def _error(path: Path, problem: str) -> StoreError:
    return StoreError(
        f"speedlab run store {path} {problem}; it was left untouched. "
        f"Pass another path (RunStore(path)) or set {ENV_VAR} to another file."
    )


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _rowid(cursor: sqlite3.Cursor) -> int:
    assert cursor.lastrowid is not None  # always set after an INSERT
    return cursor.lastrowid


def _limit(n: int | None) -> int:
    if n is None:
        return -1  # SQLite: no limit
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"history(n={n!r}): expected a number of runs >= 0, or None for all")
    return n


def history(n: int | None = None, path: str | Path | None = None) -> list[dict[str, Any]]:
    """The last `n` stored runs (all if None), newest first; [] when there is no store yet.

    Reading never creates a store file.
    """
    _limit(n)  # a bad n is refused with or without a store
    path = Path(path).expanduser() if path is not None else default_store_path()
    if not path.exists():
        return []
    with RunStore(path) as store:
        return store.history(n)


def stored_sweep(sweep_id: int, path: str | Path | None = None) -> dict[str, Any]:
    """Sweep ``sweep_id`` as ``RunStore.sweep`` gives it, with the store's ``path`` and
    ``run_dicts``: its stored runs in order when it has no ``result`` (it never finished), else
    [].

    Raises ``NotStored`` for an id the store does not hold and for a sweep that left nothing to
    show (it never finished and no run of it ended). Reading never creates a store file.
    """
    path = Path(path).expanduser() if path is not None else default_store_path()
    if not path.exists():
        raise NotStored(f"no sweep {sweep_id}: there is no run store at {path} yet")
    with RunStore(path) as store:
        entry = store.sweep(sweep_id) | {"path": str(path)}
        entry["run_dicts"] = store.sweep_runs(sweep_id) if entry["result"] is None else []
    if entry["result"] is None and not entry["run_dicts"]:
        raise NotStored(
            f"sweep {sweep_id} in the run store {path} has nothing to show: it ended before "
            "its first run did"
        )
    return entry


def history_table(rows: list[dict[str, Any]]) -> Table:
    """`RunStore.history()` rows as a Table (aligned text, HTML in a notebook, CSV). The sweep
    column is the id that ``speedlab.load`` (``%speedlab load``, ``speedlab load``) takes."""
    columns = [
        "run",
        "sweep",
        "when",
        "samples/s",
        "speedup",
        "data_time ms",
        "batch_time ms",
        "data share",
        "final loss",
        "name",
        "knobs",
        "error",
    ]
    return Table(
        columns,
        [
            [
                str(row["run_id"]),
                str(row["sweep_id"]),
                (row["created"] or "")[:16].replace("T", " "),
                fmt(row["samples_per_s"], ".1f"),
                fmt(row["speedup"], ".2f", suffix="x"),
                fmt(row["data_time"], ".2f", scale=1e3),
                fmt(row["batch_time"], ".2f", scale=1e3),
                fmt(row["data_share"], ".0%"),
                fmt(row["final_loss"], ".4g"),
                row["sweep"] or "",
                " ".join(f"{k}={v}" for k, v in row["knobs"].items()) or "as written",
                _first_line(row["error"]),
            ]
            for row in rows
        ],
    )


def format_history(rows: list[dict[str, Any]]) -> str:
    """An aligned text table of `RunStore.history()` rows, for `%speedlab history`."""
    return str(history_table(rows)) if rows else "No runs stored yet."


def _first_line(error: str | None, width: int = 60) -> str:
    line = next(iter((error or "").strip().splitlines()), "")
    return line if len(line) <= width else line[: width - 1] + "…"
