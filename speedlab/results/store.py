"""The run history: every sweep and run, kept in an SQLite file as JSON text and numbers.

Runs are written as each one ends, so a crash or a kernel restart loses nothing measured; when
a sweep ends, its whole result (runs, verdicts, findings, notes) is kept beside them, so it can
be shown again exactly as it was. Nothing stored is ever unpickled or executed. A file that is
not a speedlab store (another application's database, random bytes) is refused and left exactly
as it was; a store from an earlier speedlab is brought up to this schema in place.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

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


def _reads(method: Callable[..., T]) -> Callable[..., T]:
    """A reading method whose SQLite errors say what is wrong with the file (``_reading``)."""

    @functools.wraps(method)
    def reading(store: RunStore, *args: Any, **kwargs: Any) -> T:
        with store._reading():
            return method(store, *args, **kwargs)

    return reading


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

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False) -> None:
        self.path = Path(path).expanduser() if path is not None else default_store_path()
        _refuse_non_sqlite(self.path)
        if read_only and self._open_read_only():
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except (OSError, sqlite3.Error) as exc:
            raise _error(self.path, f"cannot be opened ({exc})") from exc
        try:
            self._init_schema()
            # After the check, so a foreign database's journal mode is never changed.
            self._set_wal()
            self._conn.execute("PRAGMA foreign_keys = ON")
        except BaseException:
            self._conn.close()
            raise

    def _open_read_only(self) -> bool:
        """Open the store for reading only, as ``history`` and ``load`` do: without the write
        lock a writer holds for a moment (readers and a writer work at once in WAL mode) and
        where the file or its folder cannot be written (a read-only home). Where the folder
        cannot hold the WAL's shared-memory file, the file is read as it is (``immutable``).
        False where the file must be written first: missing, empty, or of an earlier schema."""
        if not self.path.exists():
            return False
        uri = self.path.resolve().as_uri()
        for mode in ("?mode=ro", "?mode=ro&immutable=1"):
            try:
                self._conn = sqlite3.connect(
                    uri + mode, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None
                )
            except sqlite3.Error as exc:
                raise _error(self.path, _problem(exc)) from exc
            try:
                app_id, version, tables = self._schema()
                break
            except sqlite3.DatabaseError as exc:
                self._conn.close()
                if mode != "?mode=ro" or not isinstance(exc, sqlite3.OperationalError):
                    raise _error(self.path, _problem(exc)) from exc
        if (app_id == 0 and tables == 0) or version in MIGRATIONS:
            self._conn.close()
            return False
        try:
            self._check(app_id, version, tables)
        except StoreError:
            self._conn.close()
            raise
        return True

    def _schema(self) -> tuple[int, int, int]:
        """The file's application id, schema version and number of schema objects."""
        conn = self._conn
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        return app_id, version, tables

    def _check(self, app_id: int, version: int, tables: int) -> None:
        """Refuse a file that is not a speedlab store this speedlab can read or bring up to date."""
        if app_id != APPLICATION_ID:
            raise _error(
                self.path,
                f"is another application's SQLite database (application_id {app_id}, "
                f"{tables} schema objects)",
            )
        if version > SCHEMA_VERSION:
            raise _error(
                self.path,
                f"has run store schema {version}, newer than schema {SCHEMA_VERSION} "
                "that this speedlab reads (a newer speedlab wrote it)",
            )
        if version not in MIGRATIONS and version != SCHEMA_VERSION:
            raise _error(
                self.path,
                f"has run store schema {version}, which this speedlab cannot read (it "
                f"reads schema {min(MIGRATIONS)} to {SCHEMA_VERSION})",
            )

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
        with self._transaction() as conn:
            app_id, version, tables = self._schema()
            if app_id == 0 and tables == 0:
                for statement in SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                return
            self._check(app_id, version, tables)
            if version in MIGRATIONS:
                self._migrate(conn, version)

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
        """One write transaction, taking the write lock at once (waits up to BUSY_TIMEOUT_S);
        SQLite's errors as a StoreError that says what is wrong with the file."""
        with self._reading():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """SQLite's errors, and stored text that is not JSON, as a StoreError that says what
        is wrong with the file (damaged, locked, read-only, the disk full)."""
        try:
            yield self._conn
        except sqlite3.DatabaseError as exc:
            raise _error(self.path, _problem(exc)) from exc
        except json.JSONDecodeError as exc:
            raise _error(self.path, f"is a damaged run store (a stored result: {exc})") from exc

    def new_sweep(self, *, name: str | None, cell_hash: str | None, env: dict[str, Any]) -> int:
        """Record a new sweep; returns its id."""
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO sweeps (created, name, cell_hash, env_json) VALUES (?, ?, ?, ?)",
                (_now(), name, cell_hash, _json(env)),
            )
        return _rowid(cursor)

    def add_run(self, sweep_id: int, position: int, run: dict[str, Any]) -> int:
        """Record one run (a RunResult's `to_dict()`); returns its id.

        The whole dict is kept as JSON; its headline figures also go into columns, and a
        missing one is stored as NULL.
        """
        result_json = _json(run)
        figures = [run.get(key) for key in FIGURES]
        with self._transaction() as conn:
            cursor = conn.execute(
                f"INSERT INTO runs (sweep_id, created, position, knobs_json, {', '.join(FIGURES)},"
                f" result_json) VALUES ({', '.join('?' * (len(FIGURES) + 5))})",
                (
                    sweep_id,
                    _now(),
                    position,
                    _json(run.get("knobs") or {}),
                    *figures,
                    result_json,
                ),
            )
        return _rowid(cursor)

    def finish_sweep(
        self,
        sweep_id: int,
        sweep: dict[str, Any],
        speedups: Mapping[int, float | None] | None = None,
    ) -> None:
        """Keep the sweep's whole result (a SweepResult's ``to_dict()``) when it has ended,
        and each stored run's speedup over the baseline (``speedups``, by the position it was
        stored at), which only the judged sweep knows.

        Its runs were stored one by one as each ended; this is what ``load`` shows again.
        """
        text = _json(sweep)
        with self._transaction() as conn:
            cursor = conn.execute(
                "UPDATE sweeps SET result_json = ? WHERE id = ?", (text, sweep_id)
            )
            conn.executemany(
                "UPDATE runs SET speedup = ? WHERE sweep_id = ? AND position = ?",
                [(speedup, sweep_id, position) for position, speedup in (speedups or {}).items()],
            )
        if cursor.rowcount == 0:
            raise self._no_sweep(sweep_id)

    @_reads
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

    @_reads
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

    @_reads
    def history(self, n: int | None = None) -> list[dict[str, Any]]:
        """The last `n` runs (all if None), newest first, with their sweep's name and cell."""
        rows = self._conn.execute(
            "SELECT runs.id, runs.sweep_id, sweeps.name, runs.created, sweeps.cell_hash,"
            " runs.position, runs.knobs_json,"
            f" {', '.join('runs.' + key for key in FIGURES)}"
            " FROM runs JOIN sweeps ON sweeps.id = runs.sweep_id"
            " ORDER BY runs.id DESC LIMIT ?",
            (limit_of(n),),
        ).fetchall()
        names = ("run_id", "sweep_id", "sweep", "created", "cell_hash", "position", "knobs")
        history = []
        for row in rows:
            entry = dict(zip((*names, *FIGURES), row, strict=True))
            entry["knobs"] = json.loads(entry["knobs"])
            history.append(entry)
        return history

    @_reads
    def run(self, run_id: int) -> dict[str, Any]:
        """The full dict stored for a run."""
        row = self._conn.execute("SELECT result_json FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None:
            raise NotStored(f"no run {run_id} in the run store {self.path}")
        return json.loads(row[0])

    @_reads
    def sweeps(self, n: int | None = None) -> list[dict[str, Any]]:
        """The last `n` sweeps (all if None), newest first, with their number of runs and
        whether they finished (their whole result is kept)."""
        rows = self._conn.execute(
            "SELECT sweeps.id, sweeps.created, sweeps.name, sweeps.cell_hash, sweeps.env_json,"
            " (SELECT count(*) FROM runs WHERE runs.sweep_id = sweeps.id),"
            " sweeps.result_json IS NOT NULL"
            " FROM sweeps ORDER BY sweeps.id DESC LIMIT ?",
            (limit_of(n),),
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


def _problem(exc: sqlite3.DatabaseError) -> str:
    """What SQLite's error says is wrong with the file, in the words of ``_error``."""
    text = str(exc)
    if "locked" in text or "busy" in text:
        return f"is locked by another process ({text}); try again once it has finished writing"
    if "readonly" in text or "read-only" in text:
        return f"cannot be written here ({text})"
    if "full" in text:
        return f"cannot be written: the disk is full ({text})"
    if "I/O" in text:
        return f"could not be read or written ({text}): the disk may be full or failing"
    if "unable to open" in text:
        return f"cannot be opened ({text})"
    return f"is a damaged SQLite database ({text})"


def _json(value: Any) -> str:
    """JSON text of a result; a value JSON has no form for (an object passed as a Trainer
    argument) is kept as its repr, so that one value never costs the run its place."""
    return json.dumps(value, default=repr)


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


def limit_of(n: int | None) -> int:
    """SQLite's LIMIT for the last `n` (all if None); refuses what is not a count."""
    if n is None:
        return -1  # SQLite: no limit
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"history(n={n!r}): expected a number of runs >= 0, or None for all")
    return n
