"""The container's CPU quota and CPU use, from this process's own cgroup (v1 or v2).

Binder, JupyterHub and Kubernetes limit a kernel with a CPU quota on its cgroup, while
``os.cpu_count()`` and ``/proc/stat`` still describe the whole host: a kernel limited to 1.5
cores sees all the host's cores, and the host's CPU figures are mostly other tenants' work. The
quota says how much CPU a run may use; the cgroup's own CPU counter (v1 ``cpuacct.usage``, v2
``cpu.stat``'s ``usage_usec``) says what every process under that quota used, so the processes
that share the quota with a run can be told from the run itself.

The cgroup is found the way the kernel names it (``/proc/self/cgroup`` and
``/proc/self/mountinfo``), so it is right inside a container, which sees its own cgroup as the
top of the mount, and on a host where the process sits in a child cgroup. A quota set on a cgroup
above the process's own limits it too: the tightest one up to the top of the mount counts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

PROC_SELF = Path("/proc/self")

V1_UNLIMITED_MEMORY = 2**62
"""cgroup v1 writes "no memory limit" as a huge page-aligned number; anything above is none."""


@dataclass(frozen=True)
class CpuQuota:
    """A CPU quota on this process's cgroup or one above it.

    Args:
        cores: the quota in cores (quota over period: 150000 / 100000 is 1.5 cores).
        cgroup: the cgroup directory the quota is set on.
        usage: the CPU-time counter of every process under the quota (v1 ``cpuacct.usage`` in
            nanoseconds, v2 ``cpu.stat``), None where it cannot be found.
    """

    cores: float
    cgroup: Path
    usage: Path | None = None

    def used_s(self, text: str | None = None) -> float | None:
        """CPU seconds the processes under the quota have used so far; None where unreadable.
        ``text``: the usage file as read by the caller (the system sampler keeps it open)."""
        if self.usage is None:
            return None
        if text is None:
            try:
                text = self.usage.read_text()
            except OSError:
                return None
        if self.usage.name == "cpu.stat":
            found = re.search(r"^usage_usec (\d+)$", text, re.MULTILINE)
            return int(found[1]) / 1e6 if found else None
        words = text.split()
        return int(words[0]) / 1e9 if words and words[0].isdigit() else None


@dataclass(frozen=True)
class _Mount:
    root: PurePosixPath  # the cgroup at the mount point, as /proc/self/cgroup names cgroups
    point: Path
    v2: bool
    controllers: frozenset[str]  # v1 only


def cpu_quota(proc: Path = PROC_SELF) -> CpuQuota | None:
    """The tightest CPU quota over this process's cgroup and those above it; None without one
    (or where the cgroups cannot be read: not Linux)."""
    mounts, cgroups = _read(proc)
    v2 = _own_dir(mounts, cgroups, "")
    if v2 is not None:
        found = _tightest(v2, _v2_cpu)
        if found is not None:
            cores, where = found
            return CpuQuota(cores, where, where / "cpu.stat")
    v1 = _own_dir(mounts, cgroups, "cpu")
    if v1 is None:
        return None
    found = _tightest(v1, _v1_cpu)
    if found is None:
        return None
    cores, where = found
    return CpuQuota(cores, where, _v1_usage(mounts, cgroups, v1, where))


def memory_limit(proc: Path = PROC_SELF) -> int | None:
    """The tightest memory limit (bytes) over this process's cgroup and those above it; None
    without one."""
    mounts, cgroups = _read(proc)
    for controller, reader in (("", _v2_memory), ("memory", _v1_memory)):
        own = _own_dir(mounts, cgroups, controller)
        found = _tightest(own, reader) if own is not None else None
        if found is not None:
            return int(found[0])
    return None


def _read(proc: Path) -> tuple[list[_Mount], dict[str, str]]:
    """The cgroup mounts this process sees, and its cgroup for each controller ("" for v2)."""
    try:
        mountinfo = (proc / "mountinfo").read_text()
        membership = (proc / "cgroup").read_text()
    except OSError:
        return [], {}
    mounts = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3 or kind[0] not in ("cgroup", "cgroup2"):
            continue
        mounts.append(
            _Mount(
                PurePosixPath(_unescape(fields[3])),
                Path(_unescape(fields[4])),
                kind[0] == "cgroup2",
                frozenset(kind[2].split(",")) if kind[0] == "cgroup" else frozenset(),
            )
        )
    cgroups: dict[str, str] = {}
    for line in membership.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                cgroups[controller] = parts[2]
    return mounts, cgroups


def _unescape(field: str) -> str:
    """A mountinfo path field with its octal escapes (``\\040`` for a space) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _own_dir(
    mounts: list[_Mount], cgroups: dict[str, str], controller: str
) -> tuple[Path, Path] | None:
    """This process's cgroup directory for ``controller`` ("" for v2) and the top of its mount,
    or None where that hierarchy is not mounted here."""
    path = cgroups.get(controller)
    if path is None:
        return None
    own = PurePosixPath(path)
    for mount in mounts:
        if mount.v2 != (controller == "") or (controller and controller not in mount.controllers):
            continue
        # Inside a container the mount's top is the container's own cgroup; a path outside it
        # (the host's name for it) is the top itself.
        if own == mount.root or mount.root in own.parents:
            return mount.point / own.relative_to(mount.root), mount.point
        return mount.point, mount.point
    return None


def _chain(own: Path, top: Path) -> list[Path]:
    """``own`` and the cgroups above it, up to ``top`` (the top of its mount)."""
    chain = [own]
    while chain[-1] != top and top in chain[-1].parents:
        chain.append(chain[-1].parent)
    return chain


def _tightest(
    dirs: tuple[Path, Path], read: Callable[[Path], float | None]
) -> tuple[float, Path] | None:
    """The smallest limit ``read`` finds on this process's cgroup and those above it, and where."""
    found = [(limit, d) for d in _chain(*dirs) if (limit := read(d)) is not None]
    return min(found, key=lambda pair: pair[0]) if found else None


def _words(path: Path) -> list[str] | None:
    try:
        return path.read_text().split()
    except OSError:
        return None


def _v2_cpu(cgroup: Path) -> float | None:
    words = _words(cgroup / "cpu.max")  # "150000 100000", or "max 100000" for no limit
    if not words or len(words) != 2 or not all(w.isdigit() for w in words):
        return None
    quota, period = map(int, words)
    return quota / period if quota > 0 and period > 0 else None


def _v1_cpu(cgroup: Path) -> float | None:
    quota, period = _words(cgroup / "cpu.cfs_quota_us"), _words(cgroup / "cpu.cfs_period_us")
    if not quota or not period or not quota[0].isdigit() or not period[0].isdigit():
        return None  # -1: no limit
    cores = int(quota[0]) / int(period[0]) if int(period[0]) > 0 else 0.0
    return cores if cores > 0 else None


def _v2_memory(cgroup: Path) -> float | None:
    words = _words(cgroup / "memory.max")
    return float(words[0]) if words and words[0].isdigit() and int(words[0]) > 0 else None


def _v1_memory(cgroup: Path) -> float | None:
    words = _words(cgroup / "memory.limit_in_bytes")
    if not words or not words[0].isdigit():
        return None
    return float(words[0]) if 0 < int(words[0]) < V1_UNLIMITED_MEMORY else None


def _v1_usage(
    mounts: list[_Mount], cgroups: dict[str, str], cpu: tuple[Path, Path], where: Path
) -> Path | None:
    """cgroup v1's CPU counter of the quota's cgroup ``where``: ``cpuacct.usage`` beside the
    quota where cpu and cpuacct are mounted together (``cpu,cpuacct``), else that of the cgroup
    of the same name under cpuacct's mount, where this process is in it (or below it)."""
    beside = where / "cpuacct.usage"
    if beside.exists():
        return beside
    acct = _own_dir(mounts, cgroups, "cpuacct")
    if acct is None:
        return None
    own, top = acct
    same = top / where.relative_to(cpu[1])
    counter = same / "cpuacct.usage"
    return counter if (same == own or same in own.parents) and counter.exists() else None
