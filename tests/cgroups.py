"""A CPU quota to test under, as Binder and JupyterHub give a kernel: a child cgroup with a
quota of some cores (cgroup v1's cpu and cpuacct hierarchies, or v2), processes put in it, and
the cgroup removed afterwards, also on failure.

Making one needs root and a writable cgroup mount; elsewhere ``QuotaCgroup`` raises
``CgroupUnavailable`` with the reason (the tests skip on it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from contextlib import suppress
from pathlib import Path

PERIOD_US = 100_000


class CgroupUnavailable(Exception):
    """No cgroup with a CPU quota can be made here; the message says why."""


def _cgroup_mounts() -> tuple[Path | None, Path | None, Path | None]:
    """The mount points of cgroup v1's cpu and cpuacct hierarchies and of cgroup v2."""
    cpu = acct = v2 = None
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None, None, None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3:
            continue
        point = Path(fields[4])
        if kind[0] == "cgroup2":
            v2 = v2 or point
        elif kind[0] == "cgroup":
            options = kind[2].split(",")
            cpu = cpu or (point if "cpu" in options else None)
            acct = acct or (point if "cpuacct" in options else None)
    return cpu, acct, v2


class QuotaCgroup:
    """A new child cgroup of the cgroup mount's top with a CPU quota of ``cores``.

    Example::

        with QuotaCgroup(1.5) as cgroup:
            cgroup.add(process.pid)
    """

    def __init__(self, cores: float) -> None:
        if os.geteuid() != 0:
            raise CgroupUnavailable("making a cgroup needs root")
        self.cores = cores
        self.dirs: list[Path] = []
        name = f"speedlab-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        cpu, acct, v2 = _cgroup_mounts()
        try:
            if cpu is not None:  # cgroup v1: the quota in cpu, the CPU counter in cpuacct
                self._make(cpu / name)
                (cpu / name / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (cpu / name / "cpu.cfs_quota_us").write_text(str(round(cores * PERIOD_US)))
                if acct is not None and acct != cpu:
                    self._make(acct / name)
            elif v2 is not None and "cpu" in (v2 / "cgroup.subtree_control").read_text().split():
                self._make(v2 / name)  # (enabling the cpu controller would change the machine)
                (v2 / name / "cpu.max").write_text(f"{round(cores * PERIOD_US)} {PERIOD_US}")
            else:
                raise CgroupUnavailable("no cgroup CPU controller is mounted here")
        except OSError as err:
            self.remove()
            raise CgroupUnavailable(f"cannot make a cgroup with a CPU quota here: {err}") from err

    def _make(self, path: Path) -> None:
        path.mkdir()
        self.dirs.append(path)

    def add(self, pid: int) -> None:
        """Put process ``pid`` (all its threads) under the quota."""
        for path in self.dirs:
            (path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        """Move any process still in the cgroup back to its parent, and remove the cgroup."""
        for path in reversed(self.dirs):
            for _ in range(100):
                with suppress(OSError):
                    for pid in (path / "cgroup.procs").read_text().split():
                        with suppress(OSError):  # it ended meanwhile
                            (path.parent / "cgroup.procs").write_text(pid)
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still busy: a process was leaving
                    time.sleep(0.05)
        self.dirs = [path for path in self.dirs if path.exists()]
        if self.dirs:
            raise RuntimeError(f"cgroups left behind: {self.dirs}")

    def __enter__(self) -> QuotaCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def quota_or_skip(cores: float) -> QuotaCgroup:
    """A ``QuotaCgroup`` of ``cores``, or the test skipped with the reason there is none."""
    import pytest

    try:
        return QuotaCgroup(cores)
    except CgroupUnavailable as err:
        pytest.skip(str(err))


REPO = Path(__file__).resolve().parents[1]

GRADE_SOLUTION = """
import json, sys
import lightning.pytorch as pl
from speedlab.analysis.compare import other_processes_cores
from dataclasses import replace
from speedlab.assignments import FASTER_PIPELINE, check, slow_pipeline
from speedlab.labs import QUIET_TRAINER

def train():  # the solution notebook's train(): four DataLoader workers
    model, data = slow_pipeline()
    data.num_workers = 4
    pl.Trainer(max_epochs=1, limit_val_batches=0, **QUIET_TRAINER).fit(model, data)

sys.stdin.readline()  # put under the quota meanwhile
result = check(train, replace(FASTER_PIPELINE, pairs=1))  # one pair: the verdict's words
runs = result.reference + result.student
print(json.dumps({
    "verdict": str(result),
    "passed": result.passed,
    "graded": result.graded,
    "speedup": result.speedup,
    "pass_mark": result.pass_mark,
    "other_cores": result.other_cores,
    "others_per_run": [other_processes_cores(run) for run in runs],
    "quota_cores": [run.system.cpu_quota_cores for run in runs],
}))
"""
"""A Python program that grades the assignment's solution with ``check()`` once it reads a
line, and prints the verdict and its figures as JSON."""


def run_under(cgroup: QuotaCgroup, code: str, *, busy: bool, timeout_s: float) -> str:
    """The output of ``python -c code`` run under the quota from its first line on (it reads a
    line before it starts), beside a process that keeps one core busy under the same quota
    where ``busy``; both are ended afterwards."""
    processes = []
    try:
        if busy:
            processes.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        program = subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        processes.append(program)
        for process in processes:
            cgroup.add(process.pid)
        out, _ = program.communicate("go\n", timeout=timeout_s)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    if program.returncode != 0:
        raise RuntimeError(f"the program under the quota failed ({program.returncode}): {out}")
    return out
