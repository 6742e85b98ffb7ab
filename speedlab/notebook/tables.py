"""The tables of results: one row per run of a sweep, one row per rank of a run.

``SweepResult.table()`` hands over to ``sweep_table``: whether each speedup is beyond noise is
the fair-comparison rule's judgement (speedlab.analysis.compare), not the result's own.
"""

from __future__ import annotations

from speedlab.analysis.compare import compare, spread_warning
from speedlab.analysis.payback import break_even, break_even_text, up_front_of
from speedlab.measure.ranks import slowest_rank
from speedlab.results.run import RunResult
from speedlab.results.sweep import SweepResult
from speedlab.results.table import Table, fmt


def sweep_table(sweep: SweepResult) -> Table:
    """One row per run: throughput, its speedup over the baseline and whether that is
    beyond noise (``compare``), the medians, the system figures and the notes."""
    columns = [
        "run",
        "samples/s",
        "speedup",
        "vs baseline",
        "data_time ms",
        "batch_time ms",
        "data share",
        "CPU %",
        "peak RSS MB",
        "final loss",
        "notes",
    ]
    versus = {
        id(run): compare(sweep.baseline, run).verdict
        for run in sweep.runs
        if run is not sweep.baseline and run.speedup is not None
    }
    # A wide spread is worth a note only where it decides a verdict: a run judged within
    # noise (or with too few measurements), and the baseline it was judged against.
    undecided = {key for key, verdict in versus.items() if verdict not in ("faster", "slower")}
    if undecided:
        undecided.add(id(sweep.baseline))
    rows = []
    for run in sweep.runs:
        spread = run.throughput_summary
        rate = fmt(run.samples_per_s, ".1f")
        if run.replicates:
            rate += f" ±{fmt(spread.iqr / 2, '.1f')}"
        noisy = spread_warning(spread) if id(run) in undecided else None
        rows.append(
            [
                run.label(sweep.baseline),
                rate,
                fmt(run.speedup, ".2f", suffix="x"),
                versus.get(id(run), "-"),
                fmt(run.data_time, ".2f", scale=1e3),
                fmt(run.batch_time, ".2f", scale=1e3),
                fmt(run.data_share, ".0%"),
                fmt(run.system.get("cpu_percent"), ".0f"),
                fmt(run.system.get("peak_rss_bytes"), ".0f", scale=1e-6),
                fmt(run.final_loss, ".3f"),
                "; ".join(
                    ([f"error: {run.error}"] if run.error else [])
                    + ([f"noisy: {noisy}"] if noisy else [])
                    + [
                        f"{spec.knob} break-even: {break_even_text(break_even(spec, without, run), run)}"
                        for spec, without in up_front_of(sweep, run)
                    ]
                    + run.notes
                ),
            ]
        )
    return Table(columns, rows, caption=sweep.name or "")


def rank_table(run: RunResult) -> Table:
    """One row per rank: its medians, its gradient-sync time and its own work per step."""
    slow = slowest_rank(run.ranks)["rank"] if run.ranks else None
    columns = ["rank", "host", "steps", "samples/s", "data_time ms", "batch_time ms"]
    columns += ["sync ms", "own work ms", "data share", "note"]
    rows = [
        [
            str(e["rank"]),
            e["host"],
            str(e["steps"]),
            fmt(e["samples_per_s"], ".1f"),
            fmt(e["data_time"], ".2f", scale=1e3),
            fmt(e["batch_time"], ".2f", scale=1e3),
            fmt(e["sync_time"], ".2f", scale=1e3),
            fmt(e["work_time"], ".2f", scale=1e3),
            fmt(e["data_share"], ".0%"),
            f"failed: {e['error']}" if e["error"] else ("slowest" if e["rank"] == slow else ""),
        ]
        for e in run.ranks
    ]
    return Table(columns, rows, caption="per rank")
