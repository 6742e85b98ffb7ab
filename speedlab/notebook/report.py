"""A run's report in words: its figures, phases, system use, ranks and notes.

``RunResult.report()`` (and so the result's display) hands over to ``run_report``, which adds
the findings that only several ranks show (read from the ranks' own records, so a bare probe's
result in a script shows them too).
"""

from __future__ import annotations

from speedlab.analysis.ranks import rank_findings
from speedlab.analysis.utilisation import mfu_text
from speedlab.notebook.tables import rank_table
from speedlab.results.run import RunResult
from speedlab.results.table import fmt


def run_report(run: RunResult) -> str:
    """The steady figures (averages, with p10/p90 beside them), share, throughput, phases,
    system; with several ranks, the rank table and the findings only they show."""
    d, b = run.data_summary, run.batch_summary

    def ms(x: float) -> str:
        return fmt(x, ".2f", scale=1e3)

    lines = [
        f"samples/s     {fmt(run.samples_per_s, '.1f')}   ({run.samples} samples in {run.steps} steps)",
        f"data_time     {ms(run.data_time)} ms average   (p10 {ms(d.p10)}, p90 {ms(d.p90)})",
        f"batch_time    {ms(run.batch_time)} ms average   (p10 {ms(b.p10)}, p90 {ms(b.p90)})",
        "              averages over the steady steps, pauses left out; p10/p90: a tenth of the",
        "              steps took less than p10, a tenth more than p90",
        f"data share    {fmt(run.data_share, '.0%')}",
        f"MFU           {mfu_text(run)}",
        "phases        " + ", ".join(f"{k} {v:.2f} s" for k, v in run.phases.items() if v > 0),
    ]
    if run.system.sampled:
        lines.append(
            f"CPU           {fmt(run.system.cpu_percent, '.0f')}% of the machine, "
            f"peak RSS {fmt(run.system.peak_rss_bytes, '.0f', scale=1e-6)} MB "
            "(resident memory of the run's processes, each page once)"
        )
        if note := run.system.memory_note:
            lines.append(f"note: {note}")
    if run.final_loss is not None:
        lines.append(f"final loss    {run.final_loss:.4f}")
    if run.ranks:
        lines.append(str(rank_table(run)))
    lines += [f"note: {n}" for n in run.notes]
    if run.ranks:
        lines += [str(f) for f in rank_findings(run)]
    if run.error:
        lines.append(f"error: {run.error}")
    return "\n".join(lines)
