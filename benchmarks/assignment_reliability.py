"""Benchmark: the assignment's reference solution passes on a quiet machine, and is never
failed beside a busy core.

Runs ``check()`` of the faster-pipeline solution (the solution notebook's ``train()``: four
DataLoader workers) ``--quiet`` times, then ``--hogged`` times beside another process that
keeps one core busy, and prints each verdict with its speedup, the pass mark and the CPU other
processes used, then the counts. Acceptance (issue 18): passes in every quiet check, and never
FAIL beside the busy core (PASS or CANNOT GRADE NOW). A quiet check that other work on the
machine made decline is counted as declined, not as passed.

Usage::

    python benchmarks/assignment_reliability.py [--quiet 10] [--hogged 5]

Exits with 1 when the acceptance fails.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import time

import lightning.pytorch as pl

from speedlab.analysis.compare import other_processes_cores
from speedlab.assignments import CheckResult, check, slow_pipeline
from speedlab.labs import QUIET_TRAINER


def solution() -> None:
    """The solution notebook's train()."""
    model, data = slow_pipeline()
    data.num_workers = 4
    pl.Trainer(max_epochs=1, limit_val_batches=0, **QUIET_TRAINER).fit(model, data)


def verdict(result: CheckResult) -> str:
    return "pass" if result.passed else "fail" if result.graded else "declined"


def checks(name: str, n: int) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for i in range(n):
        start = time.monotonic()
        result = check(solution)
        counts[verdict(result)] += 1
        others = [other_processes_cores(r) for r in result.reference + result.student]
        print(
            f"{name} {i + 1:2d}: {verdict(result):8s} {result.speedup:5.2f}x "
            f"(mark {result.pass_mark:.2f}x) others per run "
            f"{' '.join(f'{o:.1f}' for o in others)} cores, {time.monotonic() - start:.0f} s",
            flush=True,
        )
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", type=int, default=10)
    parser.add_argument("--hogged", type=int, default=5)
    args = parser.parse_args()
    quiet = checks("quiet", args.quiet)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        hogged = checks("one core busy", args.hogged)
    finally:
        hog.kill()
        hog.wait()
    print(f"quiet: {dict(quiet)}  one core busy: {dict(hogged)}")
    return 0 if quiet["pass"] == args.quiet and not hogged["fail"] else 1


if __name__ == "__main__":
    sys.exit(main())
