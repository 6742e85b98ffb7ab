"""Stored sweeps brought back: ``speedlab.load(sweep_id)``.

A sweep that ended was kept whole in the run store (``RunStore.finish_sweep``): it comes back
as the SweepResult it was, its verdicts and findings as they were judged when it ran, so it
shows the same text on any machine. A sweep that never finished (a crash, an interrupted
kernel, a store written by an earlier speedlab) has only its runs, stored one by one as each
ended: it is assembled and judged from them now, as ``run_sweep`` does at its end, and says so.
So is a sweep judged on medians by an earlier speedlab (format 2): its figures now follow one
rule (speedlab.results.steady), and its stored verdicts would not agree with them.
"""

from __future__ import annotations

from pathlib import Path

from speedlab.results.history import stored_sweep
from speedlab.results.run import RunResult
from speedlab.results.store import StoreError
from speedlab.results.sweep import MEDIANS_FORMAT, SweepResult


def load(sweep_id: int, *, store: str | Path | None = None) -> SweepResult:
    """A stored sweep as a SweepResult, shown as it was when it ran.

    Args:
        sweep_id: the sweep's number, as ``speedlab.history()`` rows (``sweep_id``) and
            ``speedlab history`` (its sweep column) give it.
        store: the run store file; default ``$SPEEDLAB_STORE`` or ``.speedlab/runs.sqlite``.

    Raises ``NotStored`` (a KeyError) naming the id and the store when it holds no such sweep,
    and ``StoreError`` for a file that is not a run store this speedlab reads.

    Example::

        sweep = speedlab.load(3)
        print(sweep.table())
    """
    if isinstance(sweep_id, bool) or not isinstance(sweep_id, int):
        raise TypeError(f"load(sweep_id={sweep_id!r}): expected a sweep's number, such as 3.")
    entry = stored_sweep(sweep_id, store)
    result = entry["result"]
    medians = result is not None and result.get("format") == MEDIANS_FORMAT
    if result is not None and not medians:
        try:
            return SweepResult.from_dict(result)
        except ValueError as err:  # a layout this speedlab does not read: one line, no guess
            raise StoreError(f"sweep {sweep_id} in the run store {entry['path']}: {err}") from None
    # Only here: judging loads the analysis and with it torch, which a finished sweep (shown
    # as it was stored, in a terminal as well) does not need.
    from speedlab.run.sweep import sweep_from_runs

    why = (
        "was judged on medians by an earlier speedlab; its figures follow one rule now "
        "(averages over whole rounds of the workers, pauses left out)"
        if medians
        else "was stored without its final result (it never reached its end, as after a "
        "crash or a kernel restart, or an earlier speedlab stored it)"
    )
    note = (
        f"Judged again when loaded: sweep {sweep_id} {why}, so its comparisons and findings "
        "were made now from its stored runs."
    )
    runs = [RunResult.from_dict(run) for run in (result["runs"] if medians else entry["run_dicts"])]
    return sweep_from_runs(runs, name=entry["name"], notes=[note])
