"""The container's CPU quota and CPU use (speedlab.measure.cgroup): from cgroup trees laid out as
cgroup v1 and v2 mount them, and from a real cgroup with a quota of 1.5 cores where this
machine lets root make one."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from speedlab.measure.cgroup import CpuQuota, cpu_quota, memory_limit
from speedlab.measure.machine import cgroup_limits
from tests.cgroups import quota_or_skip, run_under

# mountinfo lines as the kernel writes them: (the cgroup at the mount point, where it is
# mounted under the fake root, the filesystem, its options)
V1_APART = [
    ("/", "cpu", "cgroup", "rw,cpu"),
    ("/", "cpuacct", "cgroup", "rw,cpuacct"),
    ("/", "memory", "cgroup", "rw,memory"),
    ("/", "unified", "cgroup2", "rw"),
]
V1_TOGETHER = [  # a container without a cgroup namespace: its own cgroup at the mount point
    ("/docker/abc", "cpu,cpuacct", "cgroup", "rw,cpu,cpuacct"),
    ("/docker/abc", "memory", "cgroup", "rw,memory"),
]
V2 = [("/", "", "cgroup2", "rw,nsdelegate")]


def fake_cgroups(
    tmp_path: Path, mounts: list[tuple], cgroups: dict[str, str], files: dict[str, str]
) -> Path:
    """A /proc/self with these cgroup mounts and memberships (controllers: path), and these
    files in the mounted trees; returns the fake /proc/self."""
    proc, fs = tmp_path / "proc", tmp_path / "fs"
    proc.mkdir()
    lines = [
        f"{30 + i} 25 0:{40 + i} {root} {fs / point} rw,relatime - {kind} cgroup {options}"
        for i, (root, point, kind, options) in enumerate(mounts)
    ]
    (proc / "mountinfo").write_text("\n".join(lines) + "\n")
    (proc / "cgroup").write_text(
        "".join(f"{i}:{names}:{path}\n" for i, (names, path) in enumerate(cgroups.items()))
    )
    for name, text in files.items():
        (fs / name).parent.mkdir(parents=True, exist_ok=True)
        (fs / name).write_text(text)
    return proc


def test_v1_quota_above_the_process_with_its_cpu_counter_in_the_cpuacct_mount(
    tmp_path: Path,
) -> None:
    # cpu and cpuacct apart (as on this machine); the quota on the course's cgroup, above the
    # kernel's own
    proc = fake_cgroups(
        tmp_path,
        V1_APART,
        {"cpu": "/course/kernel", "cpuacct": "/course/kernel", "memory": "/", "": "/"},
        {
            "cpu/course/cpu.cfs_quota_us": "150000\n",
            "cpu/course/cpu.cfs_period_us": "100000\n",
            "cpu/course/kernel/cpu.cfs_quota_us": "-1\n",
            "cpu/course/kernel/cpu.cfs_period_us": "100000\n",
            "cpuacct/course/cpuacct.usage": "2500000000\n",
            "cpuacct/course/kernel/cpuacct.usage": "1000000000\n",
            "unified/cpu.stat": "usage_usec 999000000\n",  # the host's: not the quota's
        },
    )
    fs = tmp_path / "fs"
    quota = cpu_quota(proc)
    assert quota == CpuQuota(1.5, fs / "cpu" / "course", fs / "cpuacct/course/cpuacct.usage")
    assert quota.used_s() == 2.5


def test_v1_container_sees_its_own_cgroup_at_the_top_of_the_mount(tmp_path: Path) -> None:
    proc = fake_cgroups(
        tmp_path,
        V1_TOGETHER,
        {"cpu,cpuacct": "/docker/abc", "memory": "/docker/abc"},
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "200000\n",
            "cpu,cpuacct/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/cpuacct.usage": "7000000000\n",
            "memory/memory.limit_in_bytes": "1073741824\n",
        },
    )
    quota = cpu_quota(proc)
    assert quota is not None and (quota.cores, quota.used_s()) == (2.0, 7.0)
    assert cgroup_limits(proc) == (2.0, 2**30)


def test_v2_the_tightest_quota_counts_with_its_cgroups_cpu_stat(tmp_path: Path) -> None:
    proc = fake_cgroups(
        tmp_path,
        V2,
        {"": "/hub/user/kernel"},
        {
            "hub/cpu.max": "100000 100000\n",
            "hub/cpu.stat": "usage_usec 4000000\nuser_usec 3000000\n",
            "hub/user/cpu.max": "300000 100000\n",
            "hub/user/kernel/cpu.max": "max 100000\n",
            "hub/user/kernel/memory.max": "max\n",
            "hub/user/memory.max": "2147483648\n",
        },
    )
    quota = cpu_quota(proc)
    assert quota is not None and quota.cgroup == tmp_path / "fs" / "hub"
    assert (quota.cores, quota.used_s()) == (1.0, 4.0)
    assert memory_limit(proc) == 2**31


@pytest.mark.parametrize(
    ("mounts", "cgroups", "files"),
    [
        (V2, {"": "/"}, {"cpu.stat": "usage_usec 5\n"}),  # the root cgroup: never a quota
        (V2, {"": "/"}, {"cpu.max": "max 100000\n", "memory.max": "max\n"}),
        (
            V1_APART,
            {"cpu": "/", "cpuacct": "/", "memory": "/", "": "/"},
            {
                "cpu/cpu.cfs_quota_us": "-1\n",
                "cpu/cpu.cfs_period_us": "100000\n",
                "memory/memory.limit_in_bytes": "9223372036854771712\n",  # v1's "no limit"
            },
        ),
    ],
    ids=["v2-root", "v2-max", "v1-unlimited"],
)
def test_no_limit_reads_as_none(
    tmp_path: Path, mounts: list, cgroups: dict[str, str], files: dict[str, str]
) -> None:
    proc = fake_cgroups(tmp_path, mounts, cgroups, files)
    assert cgroup_limits(proc) == (None, None)


def test_without_proc_there_is_no_quota(tmp_path: Path) -> None:  # not Linux
    assert cgroup_limits(tmp_path) == (None, None)


def test_a_cpu_counter_that_does_not_count_this_process_is_not_used(tmp_path: Path) -> None:
    # The quota on cpu's /course, but this process's cpuacct cgroup is elsewhere.
    proc = fake_cgroups(
        tmp_path,
        V1_APART,
        {"cpu": "/course", "cpuacct": "/other", "": "/"},
        {
            "cpu/course/cpu.cfs_quota_us": "50000\n",
            "cpu/course/cpu.cfs_period_us": "100000\n",
            "cpuacct/course/cpuacct.usage": "1\n",
            "cpuacct/other/cpuacct.usage": "1\n",
        },
    )
    quota = cpu_quota(proc)
    assert quota is not None and quota.cores == 0.5
    assert quota.usage is None and quota.used_s() is None


# -- a real cgroup -------------------------------------------------------------------------

MEASURE = textwrap.dedent(
    """
    import json, sys, time
    from speedlab.analysis.compare import other_processes_cores
    from speedlab.measure.cgroup import cpu_quota
    from speedlab.measure.machine import format_system_info, system_info, usable_cores, usable_cpu
    from speedlab.measure.system import SystemSampler
    from speedlab.results.run import RunResult

    sys.stdin.readline()  # put under the quota meanwhile
    with SystemSampler() as sampler:
        end = time.monotonic() + 3
        while time.monotonic() < end:  # one busy thread, beside the other process's
            pass
    system = sampler.stop()
    print(json.dumps({
        "quota": cpu_quota().cores,
        "usable_cpu": usable_cpu(),
        "usable_cores": usable_cores(),
        "described": format_system_info(system_info()),
        "system": system.to_dict(),
        "others": other_processes_cores(RunResult(system=system)),
    }))
    """
)


def test_in_a_real_cgroup_the_quota_and_the_cpu_of_every_process_under_it_are_read() -> None:
    with quota_or_skip(1.5) as cgroup:
        found = json.loads(run_under(cgroup, MEASURE, busy=True, timeout_s=60))
    system = found["system"]
    assert (found["quota"], found["usable_cpu"], found["usable_cores"]) == (1.5, 1.5, 2)
    assert system["cpu_quota_cores"] == 1.5
    assert "2 usable by this process (a CPU quota of 1.5 cores)" in found["described"]
    cgroup_cpu, ours = system["cgroup_cpu_percent"] / 100, system["main_cpu_percent"] / 100
    # The cgroup's CPU holds this process's and the busy one's, within the quota.
    assert ours + 0.2 < cgroup_cpu <= 1.5 * 1.1, system
    # The other process's share of the quota: the cgroup's CPU less this process's, at least.
    assert cgroup_cpu - ours - 0.05 <= found["others"] <= 1.5, found
