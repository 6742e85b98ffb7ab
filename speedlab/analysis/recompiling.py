"""The doctor's rule for a step compiled again and again on an XLA device (``recompiling``).

XLA compiles a graph for each new shape of the step's work. After warm-up the graphs are
cached; a cell that compiles in its steady steps pays seconds of compilation each time, kept
apart from batch_time by the probe (``records["compile_time"]``). The likely cause is named from
what the steps show: a host transfer inside the step, a batch size that changes, or else a
Python value that changes a shape or a constant of the graph.
"""

from __future__ import annotations

from speedlab.results.findings import Finding
from speedlab.results.run import RunResult

RECOMPILING_SHARE_CRITICAL = 0.25
"""Share of the steady steps' time (compiling included) spent compiling that is critical."""

_CAUSES = {
    "transfer": (
        "a host transfer inside the step ({n} in the steady steps: .item(), a print of a tensor, "
        "an if on a tensor's value) cuts the graph there, and a value read back into Python "
        "makes the next graph new",
        "Keep the step's values on the device: log them with self.log (Lightning reads them "
        "after the step) and move .item(), prints and tensor-valued ifs out of training_step.",
    ),
    "batch_size": (
        "the batch's size changes ({n} sizes among the steady steps), and each new shape is a "
        "new graph",
        "Give every batch one size: drop_last=True on the DataLoader, or pad the last batch.",
    ),
    "python_value": (
        "with neither a host transfer nor a new batch size, a Python value that changes each "
        "step (a step counter, a random number, a length) sets a shape or a constant of the "
        "graph",
        "Pass changing values as tensors on the device (torch.tensor(x, device=self.device)) "
        "and pad varying lengths to a few fixed sizes, so the graphs repeat.",
    ),
}


def recompiling(run: RunResult) -> list[Finding]:
    r = run.records
    if "compiles" not in r:
        return []
    steady = [i for i, phase in enumerate(r["phase"]) if phase == "steady"]
    again = [i for i in steady if r["compiles"][i]]
    if not again:
        return []
    count = sum(r["compiles"][i] for i in again)
    seconds = sum(r["compile_time"][i] for i in again)
    total = sum(r["wall"][i] for i in steady) + seconds
    share = seconds / total if total > 0 else 0.0
    transfers = sum(r["host_transfers"][i] for i in steady)
    sizes = {r["samples"][i] for i in steady}
    if transfers:
        cause, n = "transfer", transfers
    elif len(sizes) > 1:
        cause, n = "batch_size", len(sizes)
    else:
        cause, n = "python_value", 0
    why, advice = _CAUSES[cause]
    evidence = (
        f"XLA compiled {count} graph(s) in {len(again)} of the {len(steady)} steady steps, "
        f"{seconds:.2f} s: {share:.0%} of their time, compiling included (kept out of "
        f"batch_time, in the compile phase). Likely cause: {why.format(n=n)}."
    )
    summary = (
        f"The step is compiled again in {len(again)} of {len(steady)} steady steps: "
        f"{share:.0%} of the time; give every step the same graph"
    )
    severity = "critical" if share >= RECOMPILING_SHARE_CRITICAL else "warn"
    return [Finding("recompiling", evidence, advice, None, severity, summary=summary)]
