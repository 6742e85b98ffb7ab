"""The tables of results: one row per run of a sweep, one row per rank of a run.

``SweepResult.table()`` hands over to ``sweep_table``, which formats what each run stored when
its sweep was judged: its comparison with the baseline and its break-even figures.
"""

from __future__ import annotations

from speedlab.analysis.payback import break_even_notes
from speedlab.analysis.predict import guess_text, predicted_text, prediction_gap
from speedlab.measure.ranks import slowest_rank
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.results.table import Table, fmt

SWEEP_COLUMNS = {
    "run": "the knobs that differ from the baseline (the first run); (ran X): a knob that ran "
    "otherwise than asked",
    "samples/s": "samples of the steady steps over their time, pauses left out (with --repeat: "
    "the repeats' median ± half their IQR)",
    "speedup": "samples/s over the baseline's",
    "vs baseline": "faster or slower beyond the noise of both runs; else within noise or too "
    "few to tell, with the reason",
    "predicted": "speedlab's prediction of the speedup, made before the run from the "
    "baseline's split of a step (a prediction, not a measurement); none where the split cannot "
    "predict the knob",
    "your guess": "the learner's guess, said before the run (--predict), and whether it held",
    "data_time ms": "average time a steady step waited for its batch, over whole rounds of the "
    "DataLoader workers",
    "batch_time ms": "the rest of a steady step: forward, backward, optimizer, and the loop's "
    "hooks and logging",
    "data share": "data_time / (data_time + batch_time): the part of a step spent waiting for data",
    "device busy / input / launches ms": "a steady step's time on an asynchronous device, three "
    "ways: busy (its own work, traced on one warm-up step), idle for want of input (its "
    "data_time), idle between kernels waiting for the host's launches (the rest of batch_time); "
    "shown where the device traced its work",
    "MFU": "model FLOPs utilisation: the steady steps' FLOPs per second over the device's peak "
    "(a CPU's measured, a GPU's data sheet's); - where either is unknown",
    "CPU %": "average CPU use of the whole machine during the fit, in % of all its cores (other "
    "processes included)",
    "peak RSS MB": "most memory at once during the fit: the training process's RSS plus its "
    "DataLoader workers' own pages (MB = 10^6 bytes)",
    "final loss": "the loss of the last training step (a faster knob must not spoil training)",
    "notes": "errors, a wide spread where it decides the verdict, break-even of up-front costs, "
    "a prediction far off and why, what a knob resolved to or could not do here",
}
"""The columns of the sweep table, in order, and what each shows in one line: the hover text
of its heading in HTML and the lines of ``Table.legend()``."""


def sweep_table(sweep: SweepResult) -> Table:
    """One row per run: throughput, its speedup over the baseline and whether that is beyond
    noise (the run's stored comparison), the steady-state figures, the system figures and the
    notes; each column described in ``SWEEP_COLUMNS`` (``sweep.table().legend()``)."""
    bases = [sweep.baseline_of(run) for run in sweep.runs]  # each fit's own, where several
    judged = [
        run for run, base in zip(sweep.runs, bases) if run is not base and run.speedup is not None
    ]
    # A wide spread is worth a note only where it decides a verdict: a run judged within
    # noise (or with too few measurements), and the baseline it was judged against.
    undecided = {id(run) for run in judged if not run.comparison.decided}
    undecided |= {id(sweep.baseline_of(run)) for run in judged if id(run) in undecided}
    rows = []
    for run, base in zip(sweep.runs, bases):
        rate = fmt(run.samples_per_s, ".1f")
        if run.replicates:
            rate += f" ±{fmt(run.throughput_summary.iqr / 2, '.1f')}"
        noisy = run.comparison.noisy if id(run) in undecided and run.comparison else None
        rows.append(
            [
                run.label(base),
                rate,
                fmt(run.speedup, ".2f", suffix="x"),
                verdict_text(run, base),
                predicted_text(run) or "-",
                guess_text(run) or "-",
                fmt(run.data_time, ".2f", scale=1e3),
                fmt(run.batch_time, ".2f", scale=1e3),
                fmt(run.data_share, ".0%"),
                device_split_text(run),
                fmt(run.mfu, ".1%"),
                fmt(run.system.cpu_percent, ".0f"),
                fmt(run.system.peak_rss_bytes, ".0f", scale=1e-6),
                fmt(run.final_loss, ".3f"),
                "; ".join(
                    ([f"error: {run.error}"] if run.error else [])
                    + ([f"noisy: {noisy}"] if noisy else [])
                    + break_even_notes(run)
                    + ([gap] if (gap := prediction_gap(run)) else [])
                    + run.notes
                ),
            ]
        )
    columns = list(SWEEP_COLUMNS)
    unused = {
        "your guess": not any(run.guess for run in sweep.runs),
        "device busy / input / launches ms": all(run.device_split is None for run in sweep.runs),
    }
    for column in [column for column, drop in unused.items() if drop]:
        at = columns.index(column)
        columns.pop(at)
        for row in rows:
            row.pop(at)
    described = {column: SWEEP_COLUMNS[column] for column in columns}
    return Table(columns, rows, caption=sweep.name or "", descriptions=described)


def device_split_text(run: RunResult) -> str:
    """``busy / input / launches`` in milliseconds (``RunResult.device_split``), ``-`` where
    the device did not trace its work."""
    split = run.device_split
    if split is None:
        return "-"
    return " / ".join(
        fmt(part, ".2f", scale=1e3) for part in (split.busy, split.input, split.launches)
    )


def verdict_text(run: RunResult, baseline: RunResult) -> str:
    """The run's stored verdict against the baseline: faster, slower, within noise or too few
    to tell, the last two with their reason (``within noise (+3%, under the 5% needed)``);
    ``-`` for the baseline itself and a run that was not compared."""
    if run is baseline or run.comparison is None or run.speedup is None:
        return "-"
    comparison = run.comparison
    reason = comparison.reason
    return f"{comparison.verdict} ({reason})" if reason else str(comparison.verdict)


def rank_table(run: RunResult) -> Table:
    """One row per rank: its figures, its gradient-sync time and its own work per step."""
    slow = slowest_rank(run.ranks).rank if run.ranks else None
    columns = ["rank", "host", "steps", "samples/s", "data_time ms", "batch_time ms"]
    columns += ["sync ms", "own work ms", "data share", "note"]
    rows = [
        [
            str(e.rank),
            e.host,
            str(e.steps),
            fmt(e.samples_per_s, ".1f"),
            fmt(e.data_time, ".2f", scale=1e3),
            fmt(e.batch_time, ".2f", scale=1e3),
            fmt(e.sync_time, ".2f", scale=1e3),
            fmt(e.work_time, ".2f", scale=1e3),
            fmt(e.data_share, ".0%"),
            f"failed: {e.error}" if e.error else ("slowest" if e.rank == slow else ""),
        ]
        for e in run.ranks
    ]
    return Table(columns, rows, caption="per rank")
