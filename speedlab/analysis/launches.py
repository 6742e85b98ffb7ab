"""Whether an asynchronous device waited on the host's launches: from its own trace of a step
(idle gaps between its kernels) where it has one, else from how soon after the host queued a
step's end the device reached it. Read by the data rules and the step rules alike, since a
device that waits longer on launches than for input is limited by the launches first."""

from __future__ import annotations

import statistics

from speedlab.analysis.findings import device_name
from speedlab.results.run import RunResult
from speedlab.results.table import fmt_ms

LAUNCH_LAG_SHARE = 0.10
"""A step whose device finished within this share of its batch_time after the host queued its
last operation ran each operation as the host launched it: it waited on the host."""
LAUNCH_PACED_SHARE = 0.8
"""Share of the steady steps (with a launch lag) paced by the host's launches that makes a run
on an asynchronous device launch-bound."""


def launch_paced(run: RunResult) -> tuple[int, int, float] | None:
    """(steady steps the host's launches paced, steady steps with a launch lag, their median
    lag in seconds); None where the run has no launch lags (a synchronous device)."""
    r = run.records
    lags = r.get("launch_lag") or []
    steady = [
        i
        for i, phase in enumerate(r["phase"][: len(lags)])
        if phase == "steady" and lags[i] is not None
    ]
    if not steady:
        return None
    paced = [i for i in steady if lags[i] < LAUNCH_LAG_SHARE * r["batch_time"][i]]
    return len(paced), len(steady), statistics.median(lags[i] for i in steady)


LAUNCH_IDLE_SHARE = 0.5
"""Share of batch_time a device sat idle between its kernels, waiting for the host to launch
the next (its traced work against its timeline), that makes a run launch-bound."""


def launch_waits(run: RunResult) -> tuple[bool, str] | None:
    """Whether an asynchronous device waited on the host's launches, and the evidence in
    words: from its idle gaps between kernels where it traced its work (``device_split``),
    else from the launch lags of its steps; None on a synchronous device."""
    device = device_name(run)
    split = run.device_split
    if split is not None:
        return split.launch_share >= LAUNCH_IDLE_SHARE, (
            f"The {device}'s own trace of a step holds {fmt_ms(split.busy)} of work, against a "
            f"batch_time of {fmt_ms(run.batch_time)} on its timeline: it sat idle "
            f"{fmt_ms(split.launches)} ({split.launch_share:.0%}) between kernels, waiting for "
            "the host to launch the next, so batch_time is the host's pace of launching, not "
            f"the {device}'s work."
        )
    paced = launch_paced(run)
    if paced is None:
        return None
    n, steps, lag = paced
    return n >= LAUNCH_PACED_SHARE * steps, (
        f"In {n} of {steps} steady steps the {device} finished the training batch "
        f"{fmt_ms(lag)} (median) after the host queued its last operation: it ran each "
        "operation as soon as the host launched it and then waited for the next, so batch_time "
        f"({fmt_ms(run.batch_time)}) is the host's pace of launching, not the {device}'s work."
    )


def split_notes(run: RunResult) -> list[str]:
    """The note of a run whose device may trace no step (``device_busy["untraced"]``): why its
    time is not split into busy, idle for input and idle for launches, where a reader would
    look for that split."""
    untraced = run.device_busy.get("untraced")
    return [f"Device time not split: {untraced}."] if untraced else []


def launches_first(run: RunResult) -> bool:
    """Whether the device's own trace shows it waited on the host's launches (``launch_waits``)
    longer than it sat idle for want of input: then the launches limit the step before the data
    does, and the doctor names them, with the data wait in the same finding."""
    split = run.device_split
    return (
        split is not None
        and split.launch_share >= LAUNCH_IDLE_SHARE
        and split.launches > split.input
    )
