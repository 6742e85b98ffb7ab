"""The doctor's rules on time spent outside the training steps: waits at each epoch start
(workers restarting) and validation heavier than the training it checks."""

from __future__ import annotations

import statistics

from speedlab.results.findings import Finding
from speedlab.results.run import RunResult
from speedlab.results.table import fmt_ms

EPOCH_START_SHARE_WARN = 0.10
"""Share of the training time lost to epoch-start gaps (after the first epoch) that warns."""
EPOCH_START_SHARE_CRITICAL = 0.25
"""Epoch-start share that is critical."""
VALIDATION_SHARE_WARN = 0.25
"""Share of the fit's wall time spent validating that warns."""
VALIDATION_SHARE_CRITICAL = 0.50
"""Validation share that is critical: more time validating than training."""
LIMIT_VAL_BATCHES = 0.25
"""The ``limit_val_batches`` the doctor suggests for a validation-heavy run."""


def epoch_start(run: RunResult) -> list[Finding]:
    r = run.records
    starts = [i for i in range(1, run.steps) if r["epoch"][i] != r["epoch"][i - 1]]
    if not starts:
        return []
    typical = run.data_time
    gaps = [max(0.0, r["data_time"][i] - typical) for i in starts]
    total = sum(r["wall"])
    share = sum(gaps) / total if total > 0 else 0.0
    if share < EPOCH_START_SHARE_WARN:
        return []
    severity = "critical" if share >= EPOCH_START_SHARE_CRITICAL else "warn"
    workers = run.loader_workers()
    evidence = (
        f"{len(starts)} epoch(s) after the first each began with a wait of "
        f"{statistics.median(gaps):.2f} s (median) for the first batch, against {fmt_ms(typical)} "
        f"normally: {sum(gaps):.2f} s, {share:.0%} of the training time."
    )
    summary = (
        f"Each new epoch's first batch waits {statistics.median(gaps):.2f} s: {share:.0%} of "
        "the training time"
    )
    if workers and not run.ran.get("persistent_workers"):
        advice = (
            f"Without persistent workers, the {workers} worker process(es) start again every "
            "epoch. --persistent-workers on keeps them alive (and their memory) for the whole run."
        )
        return [
            Finding("epoch_start", evidence, advice, "persistent_workers", severity, True, summary)
        ]
    advice = (
        "Persistent workers are on or there are none, so this is work done at each epoch start: "
        "rebuilding the dataset or loader in train_dataloader() (with "
        "reload_dataloaders_every_n_epochs), or the first batches being made. Fewer, longer "
        "epochs spread it."
    )
    summary += "; do less at each epoch's start"
    return [Finding("epoch_start", evidence, advice, None, severity, summary=summary)]


def validation_heavy(run: RunResult) -> list[Finding]:
    seconds = run.phases.get("validation", 0.0)
    share = seconds / run.wall_time if run.wall_time > 0 else 0.0
    if share < VALIDATION_SHARE_WARN:
        return []
    severity = "critical" if share >= VALIDATION_SHARE_CRITICAL else "warn"
    evidence = f"Validation took {seconds:.2f} s of the {run.wall_time:.2f} s fit ({share:.0%})."
    advice = (
        "Validate less often or on fewer batches: Trainer(val_check_interval=..., "
        "check_val_every_n_epoch=..., limit_val_batches=...). The data knobs change only the "
        "training loader, so a slow validation loader keeps its own settings."
    )
    return [
        Finding(
            "validation_heavy",
            evidence,
            advice,
            "trainer.limit_val_batches",
            severity,
            LIMIT_VAL_BATCHES,
            f"Validation takes {share:.0%} of the fit",
        )
    ]
