"""Fair comparison of two runs: is a difference in throughput beyond the noise of both?

As torch.utils.benchmark does, a run is summarised by the median and interquartile range of
its throughput: over its ``--repeat`` replicates when it has them, else over its steady steps
(over windows of steps when DataLoader workers deliver in bursts; see
``RunResult.throughput_summary``).
Two runs differ when the middle halves of their distributions do not overlap and the change
is large enough to outlast drift between runs, which grows when other processes share the
machine.
"""

from __future__ import annotations

import math

from speedlab.analysis.findings import differs
from speedlab.measure.machine import usable_cores
from speedlab.results.comparison import MIN_STEPS, SAME, TOO_FEW, Comparison
from speedlab.results.run import RunResult
from speedlab.results.stats import Summary

MIN_EFFECT = 0.05
"""Smallest throughput change ever called significant: run-to-run drift is often this large
even when the per-step spread is small."""
SHARED_EFFECT = 0.5
"""How much the smallest significant change grows with other processes' CPU use: by this times
the share of the cores they took during either run (on a 2-core machine, others using one core
raise it from 5% to 30%). Their load comes and goes between runs, so the runs drift apart."""
NOISY_IQR = 0.10
"""Interquartile range over median above which a run's figures get a noise warning (as
torch.utils.benchmark warns)."""


def run_cores(run: RunResult) -> int:
    """Cores the run could use, as it recorded them where it ran; for a record made before it
    kept them, the sampled count capped by this process's affinity and quota."""
    return run.system.usable_cores or min(int(run.system.cores or usable_cores()), usable_cores())


def run_cpu(run: RunResult) -> float:
    """CPU the run could use, in cores: ``run_cores``, or the CPU quota it ran under where that
    is less (1.5 in a container limited to 1.5 cores)."""
    quota = run.system.cpu_quota_cores
    return min(float(run_cores(run)), quota) if quota else float(run_cores(run))


def other_processes_cores(run: RunResult) -> float:
    """Cores of the run's CPU that other processes took while it ran.

    Under a cgroup's CPU quota (a container): what the other processes under the quota used
    (the cgroup's CPU less the run's), plus what processes outside it used beyond the cores the
    quota leaves them (a 1.5-core quota on 2 cores leaves them half a core), at most the run's
    CPU (``run_cpu``).
    Elsewhere: the machine's CPU less the run's; 0 when the machine's figures cover more cores
    than the run may use and no quota says which of them are the run's.
    """
    s = run.system
    ours = ((s.main_cpu_percent or 0.0) + (s.workers_cpu_percent or 0.0)) / 100
    if s.cpu_quota_cores and s.cgroup_cpu_percent is not None:
        cgroup, usable = s.cgroup_cpu_percent / 100, run_cpu(run)
        inside = max(0.0, cgroup - ours)
        outside = 0.0
        if s.cpu_percent is not None and s.cores:
            elsewhere = max(0.0, s.cpu_percent / 100 * s.cores - cgroup)
            outside = max(0.0, elsewhere - (s.cores - usable))
        return min(usable, inside + outside)
    if s.cpu_percent is None or int(s.cores or 0) != run_cores(run):
        return 0.0
    return max(0.0, s.cpu_percent / 100 * int(s.cores or 1) - ours)


def spread_warning(throughput: Summary) -> str | None:
    """What to say of a throughput spread wider than ``NOISY_IQR`` of its median; else None."""
    if not throughput.relative_iqr > NOISY_IQR:
        return None
    return (
        f"the interquartile range (the spread of the middle half of its measurements) is "
        f"{throughput.relative_iqr:.0%} of the median; other work on the machine may have "
        "disturbed the run."
    )


def _inert_matmul(run: RunResult) -> bool:
    """Whether the run's ``--matmul`` level changed no float32 matmul on its hardware."""
    return run.workload.get("matmul_changes") is False


def inert_knobs(a: RunResult, b: RunResult) -> tuple[str, ...]:
    """The knobs a and b were asked to differ in, when they ran alike in each (the two ran
    the same computation, and any difference in speed is the machine's); ``(SAME,)`` when they
    were one configuration; () otherwise."""
    if a is b or (a.settings() and a.settings() == b.settings()):
        return (SAME,)
    if not (a.ok and b.ok):  # a run that failed ran nothing to be alike in
        return ()
    knobs = sorted(differs(a.knobs, b.knobs))
    if not knobs or any(k not in a.knobs or k not in b.knobs for k in knobs):
        return ()
    acted = [
        k
        for k in knobs
        if a.ran.get(k) != b.ran.get(k)
        and not (k == "matmul" and _inert_matmul(a) and _inert_matmul(b))
    ]
    if acted:
        return ()
    return tuple(f"{k}={a.knobs[k]}/{b.knobs[k]}" for k in knobs)


def compare(a: RunResult, b: RunResult) -> Comparison:
    """Compare b with a: speedup, and whether it is beyond noise (see ``Comparison``).

    The distributions are the ``--repeat`` replicates' throughputs when a run has them, else its
    steady steps' throughputs (``RunResult.throughput_summary``), which cannot show drift
    between runs: the warnings say so. With fewer than ``MIN_STEPS`` measurements on either
    side the verdict is too few to tell, and the advice says what would give enough.
    """
    sa, sb = a.throughput_summary, b.throughput_summary
    ra, rb = a.samples_per_s, b.samples_per_s
    speedup = rb / ra if ra > 0 and math.isfinite(ra) and math.isfinite(rb) else math.nan
    warnings = []
    for run, s in ((a, sa), (b, sb)):
        name = run.label() if run.knobs else "the cell's own settings"
        if noisy := spread_warning(s):
            warnings.append(f"{name}: {noisy}")
        if s.n < MIN_STEPS:
            warnings.append(f"{name}: only {s.n} measurements, {TOO_FEW}.")
    if not (a.replicates and b.replicates):
        warnings.append(
            "Single runs: drift between runs is not measured; --repeat 3 confirms a small change."
        )
    cores = min(run_cores(a), run_cores(b))
    shared = max(other_processes_cores(a) / run_cpu(a), other_processes_cores(b) / run_cpu(b))
    needed = MIN_EFFECT + SHARED_EFFECT * shared
    if needed >= 2 * MIN_EFFECT:
        warnings.append(
            f"Other processes used up to {shared:.0%} of the cores during these runs: a change "
            f"under {needed:.0%} is not called significant."
        )
    apart = sa.q3 < sb.q1 or sb.q3 < sa.q1
    big = math.isfinite(speedup) and abs(speedup - 1) >= needed
    enough = min(sa.n, sb.n) >= MIN_STEPS
    advice = None if enough else _enough_advice(a, b)
    inert = inert_knobs(a, b)
    significant = bool(apart and big and enough) and not inert
    return Comparison(
        speedup,
        significant,
        sa,
        sb,
        tuple(warnings),
        advice,
        inert,
        needed=needed,
        cores=cores,
        noisy=spread_warning(sb),
    )


def _enough_advice(a: RunResult, b: RunResult) -> str:
    """What gives both runs ``MIN_STEPS`` measurements: more steps, or more replicates."""
    if a.replicates and b.replicates:
        return f"--repeat {MIN_STEPS}"
    steps = max(run.steps_for(MIN_STEPS) for run in (a, b) if not run.replicates)
    return f"--steps {steps} or more"
