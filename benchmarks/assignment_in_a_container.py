"""Benchmark: grading in a container with a CPU quota, as Binder and JupyterHub grade.

Grades the assignment's solution (the solution notebook's ``train()``: four DataLoader workers)
with ``check()`` ``--checks`` times, each in a new Python process inside a cgroup limited to
``--cores`` cores, beside a process that keeps a core busy under the same quota, and prints
each verdict with its speedup, its pass mark and the other process's CPU in each run, then the
counts. Acceptance (issue 27): every verdict's pass mark uses the quota's cores and names them,
each verdict names the other process's share of them, and the solution is never FAIL (PASS or
CANNOT GRADE NOW).

Needs root and a writable cgroup mount (cgroup v1's cpu, or v2 with its cpu controller on);
the cgroup is removed afterwards, also on failure.

Usage::

    python benchmarks/assignment_in_a_container.py [--checks 5] [--cores 1.5]

Exits with 1 when the acceptance fails, with 2 where no cgroup can be made here.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cgroups import GRADE_SOLUTION, CgroupUnavailable, QuotaCgroup, run_under


def verdict(found: dict) -> str:
    return "pass" if found["passed"] else "fail" if found["graded"] else "declined"


def names_the_quota(found: dict, cores: float) -> bool:
    """Whether the verdict uses the quota's cores and names the other process's share."""
    quota = f"the {cores:g} cores of this container's CPU quota"
    shared = f"of {quota} (" in found["verdict"] or found["other_cores"] < 0.5
    return quota in found["verdict"] and shared and set(found["quota_cores"]) == {cores}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=5)
    parser.add_argument("--cores", type=float, default=1.5)
    args = parser.parse_args()
    counts: collections.Counter = collections.Counter()
    named = 0
    try:
        cgroup = QuotaCgroup(args.cores)
    except CgroupUnavailable as err:
        print(f"no cgroup: {err}")
        return 2
    with cgroup:
        for i in range(args.checks):
            start = time.monotonic()
            found = json.loads(run_under(cgroup, GRADE_SOLUTION, busy=True, timeout_s=600))
            counts[verdict(found)] += 1
            named += names_the_quota(found, args.cores)
            others = " ".join(f"{o:.2f}" for o in found["others_per_run"])
            print(
                f"check {i + 1}: {verdict(found):8s} {found['speedup']:5.2f}x "
                f"(mark {found['pass_mark']:.2f}x), others per run {others} cores, "
                f"{time.monotonic() - start:.0f} s\n    {found['verdict']}",
                flush=True,
            )
    print(f"{dict(counts)}; verdicts naming the quota and the others' share: {named}")
    return 0 if not counts["fail"] and named == args.checks else 1


if __name__ == "__main__":
    sys.exit(main())
