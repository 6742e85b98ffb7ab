"""The run store of one sweep: each run written as it ends, and a store that fails never
costs the sweep what it measured.

A store can fail where the sweep has nothing wrong: a read-only folder (a Binder's home), a
full disk, another program's lock held too long. The sweep then goes on without it, says so
once on stderr as it happens, and its notes say from which run on nothing was stored.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from speedlab.results.run import RunResult
from speedlab.results.store import RunStore, StoreError
from speedlab.results.sweep import SweepResult


class SweepStore:
    """Writes one sweep to the run store: ``store`` is its path, None for the default, False
    for none (nothing is written)."""

    def __init__(
        self, store: str | Path | bool | None, *, name: str | None, cell_hash: str | None
    ) -> None:
        self.notes: list[str] = []
        self._store: RunStore | None = None
        self._sweep_id = 0
        self._added: list[RunResult] = []  # in order: a run's position is its index
        if store is False:
            return
        from speedlab.measure.machine import system_info

        try:
            self._store = RunStore(None if store in (None, True) else store)
            self._sweep_id = self._store.new_sweep(
                name=name, cell_hash=cell_hash, env=system_info()
            )
        except StoreError as err:
            self._fail(err, "this sweep's runs are not stored")

    def add(self, result: RunResult) -> None:
        """Store a run as it ends."""
        position = len(self._added)
        self._added.append(result)
        if self._store is None:
            return
        try:
            self._store.add_run(self._sweep_id, position, result.to_dict())
        except StoreError as err:
            self._fail(err, f"run {position + 1} and those after it are not stored")

    def finish(self, sweep: SweepResult, groups: Sequence[Sequence[RunResult]]) -> SweepResult:
        """Keep the judged sweep whole, and each stored run's speedup (``groups``: the runs
        merged into each of the sweep's runs, in order); the sweep as it is to be shown."""
        if self._store is not None:
            positions = {id(result): k for k, result in enumerate(self._added)}  # all alive
            speedups = {
                positions[id(result)]: shown.speedup
                for shown, group in zip(sweep.runs, groups)
                for result in group
                if id(result) in positions
            }
            try:
                self._store.finish_sweep(self._sweep_id, sweep.to_dict(), speedups)
            except StoreError as err:
                self._fail(err, "its runs are stored, but not the sweep's verdicts and findings")
        if not self.notes or all(note in sweep.notes for note in self.notes):
            return sweep
        return replace(sweep, notes=[*sweep.notes, *self.notes])

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def _fail(self, err: StoreError, lost: str) -> None:
        note = f"Not stored: {err} The sweep went on; {lost}."
        print(f"speedlab: {note}", file=sys.stderr)
        self.notes.append(note)
        self.close()
