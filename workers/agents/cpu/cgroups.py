"""Per-action cgroups: cpuset = the allocated cores, memory limit, CPU quota (arl-tangram §5.2),
and a pids limit so that a fork bomb stays inside its action.

``CgroupV1Driver`` (hybrid hosts such as this one): one directory per action under
``<controller mount>/<the agent's own cgroup>/loom/<node>/`` for the cpuset, memory and cpu
controllers, and pids where that hierarchy is mounted. ``CgroupV2Driver``: a delegated, writable
subtree with cpuset+cpu+memory (and pids where available) enabled.
``detect_cgroup_driver`` picks whichever works and returns ``None`` where neither is writable:
the local backend then falls back to CPU affinity (``taskset``).

A child joins its cgroup (writes its own pid into ``procs_files``) before it execs the command,
so nothing it forks can escape; ``kill_all`` kills every process left in the cgroup.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import signal
import time
import uuid
from pathlib import Path

from workers.agents.common.sysinfo import format_cpu_list

logger = logging.getLogger(__name__)

CFS_PERIOD_US = 100_000
V1_CONTROLLERS = ("cpuset", "memory", "cpu")
PIDS = "pids"


def _read(path: Path) -> str:
    return path.read_text().strip()


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _own_cgroup_v1(controller: str) -> str:
    """This process's cgroup path in a v1 hierarchy (``/`` if unknown)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                return path
    return "/"


class CgroupHandle(abc.ABC):
    """One action's cgroup(s)."""

    @property
    @abc.abstractmethod
    def procs_files(self) -> tuple[str, ...]:
        """Files the child writes its pid into (before exec) to join."""

    @abc.abstractmethod
    def pids(self) -> list[int]:
        """Processes still in the cgroup."""

    @abc.abstractmethod
    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a process of this cgroup."""

    def kill_all(self, wait_s: float = 5.0) -> int:
        """SIGKILL everything in the cgroup until it is empty; returns how many were killed."""
        killed = 0
        deadline = time.monotonic() + wait_s
        while True:
            pids = self.pids()
            if not pids:
                return killed
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            if time.monotonic() > deadline:
                logger.error("cgroup still holds %s after %.1f s", pids, wait_s)
                return killed
            time.sleep(0.005)

    @abc.abstractmethod
    def remove(self) -> None:
        """Delete the cgroup directories (after kill_all)."""


def _pids_in(procs_file: Path) -> list[int]:
    try:
        text = procs_file.read_text()
    except OSError:
        return []
    alive = []
    for line in text.split():
        try:
            state = (Path("/proc") / line / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(int(line))
    return alive


def _rmdir(path: Path) -> None:
    for _ in range(200):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY while the last task finishes exiting
            time.sleep(0.005)
    logger.error("could not remove cgroup %s", path)


class CgroupDriver(abc.ABC):
    version: int

    limits_pids: bool = False

    @abc.abstractmethod
    def create(
        self, name: str, cores: tuple[int, ...], memory_mb: int, pids_max: int = 0
    ) -> CgroupHandle:
        """A new cgroup for one action: cpuset ``cores``, memory ``memory_mb``, at most
        ``pids_max`` processes and threads (0 = no limit; ignored without a pids controller)."""

    @abc.abstractmethod
    def existing(self, prefix: str) -> list[CgroupHandle]:
        """Cgroups whose name starts with ``prefix`` (left behind by a dead agent)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Remove the node's own directory if no action cgroup is left in it."""


class _V1Handle(CgroupHandle):
    def __init__(self, directories: dict[str, Path]) -> None:
        self.directories = directories

    @property
    def procs_files(self) -> tuple[str, ...]:
        return tuple(str(d / "cgroup.procs") for d in self.directories.values())

    def pids(self) -> list[int]:
        return _pids_in(self.directories["cpuset"] / "cgroup.procs")

    def oom_killed(self) -> bool:
        memory = self.directories.get("memory")
        if memory is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            for line in (memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        return False

    def remove(self) -> None:
        for directory in self.directories.values():
            _rmdir(directory)


class CgroupV1Driver(CgroupDriver):
    """cgroup v1: cpuset (cpus + mems copied from the parent), memory, cpu (CFS quota)."""

    version = 1

    def __init__(self, node_id: str, mount: Path = Path("/sys/fs/cgroup")) -> None:
        self.bases: dict[str, Path] = {}
        self.limits_pids = (mount / PIDS / "pids.max").exists() or (mount / PIDS).is_dir()
        if not self.limits_pids:
            logger.warning("no cgroup v1 pids hierarchy: actions get no per-action pids limit")
        for controller in (*V1_CONTROLLERS, PIDS) if self.limits_pids else V1_CONTROLLERS:
            own = _own_cgroup_v1(controller).lstrip("/")
            base = mount / controller / own / "loom" / node_id
            self._make_chain(mount / controller / own, base, controller)
            self.bases[controller] = base

    @staticmethod
    def _make_chain(root: Path, leaf: Path, controller: str) -> None:
        """mkdir -p, filling cpuset.cpus/mems of each new level from its parent."""
        current = root
        for part in leaf.relative_to(root).parts:
            parent, current = current, current / part
            current.mkdir(exist_ok=True)
            if controller == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not _read(current / knob):
                        _write(current / knob, _read(parent / knob))

    def close(self) -> None:
        for base in self.bases.values():
            with contextlib.suppress(OSError):
                base.rmdir()

    def existing(self, prefix: str) -> list[CgroupHandle]:
        names = sorted(p.name for p in self.bases["cpuset"].glob(f"{prefix}*") if p.is_dir())
        return [
            _V1Handle({c: base / name for c, base in self.bases.items() if (base / name).is_dir()})
            for name in names
        ]

    def create(
        self, name: str, cores: tuple[int, ...], memory_mb: int, pids_max: int = 0
    ) -> CgroupHandle:
        directories: dict[str, Path] = {}
        try:
            for controller, base in self.bases.items():
                directory = base / name
                directory.mkdir()
                directories[controller] = directory
            cpuset = directories["cpuset"]
            _write(cpuset / "cpuset.cpus", format_cpu_list(cores))
            _write(cpuset / "cpuset.mems", _read(cpuset.parent / "cpuset.mems"))
            if memory_mb > 0:
                _write(directories["memory"] / "memory.limit_in_bytes", str(memory_mb * 2**20))
            cpu = directories["cpu"]
            _write(cpu / "cpu.cfs_period_us", str(CFS_PERIOD_US))
            _write(cpu / "cpu.cfs_quota_us", str(len(cores) * CFS_PERIOD_US))
            if pids_max > 0 and PIDS in directories:
                _write(directories[PIDS] / "pids.max", str(pids_max))
        except OSError:
            _V1Handle(directories).remove()
            raise
        return _V1Handle(directories)


class _V2Handle(CgroupHandle):
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @property
    def procs_files(self) -> tuple[str, ...]:
        return (str(self.directory / "cgroup.procs"),)

    def pids(self) -> list[int]:
        return _pids_in(self.directory / "cgroup.procs")

    def oom_killed(self) -> bool:
        with contextlib.suppress(OSError, ValueError):
            for line in (self.directory / "memory.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        return False

    def kill_all(self, wait_s: float = 5.0) -> int:
        kill_file = self.directory / "cgroup.kill"  # Linux >= 5.14: atomic, fork-proof
        if kill_file.exists():
            with contextlib.suppress(OSError):
                _write(kill_file, "1")
        return super().kill_all(wait_s)

    def remove(self) -> None:
        _rmdir(self.directory)


class CgroupV2Driver(CgroupDriver):
    """cgroup v2 in a delegated subtree ``root`` (e.g. a systemd unit with Delegate=yes).

    ``root`` must hold no processes itself (v2's no-internal-process rule) and list cpuset, cpu
    and memory in ``cgroup.controllers``.
    """

    version = 2
    NEEDED = ("cpuset", "cpu", "memory")

    def __init__(self, node_id: str, root: Path) -> None:
        available = _read(root / "cgroup.controllers").split()
        missing = [c for c in self.NEEDED if c not in available]
        if missing:
            raise OSError(f"cgroup v2 root {root} lacks controllers {missing}")
        self.limits_pids = PIDS in available
        if not self.limits_pids:
            logger.warning("cgroup v2 root %s has no pids controller: no pids limit", root)
        self.base = root / f"loom-{node_id}"
        controllers = (*self.NEEDED, PIDS) if self.limits_pids else self.NEEDED
        enable = " ".join(f"+{c}" for c in controllers)
        _write(root / "cgroup.subtree_control", enable)
        self.base.mkdir(exist_ok=True)
        _write(self.base / "cgroup.subtree_control", enable)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.base.rmdir()

    def existing(self, prefix: str) -> list[CgroupHandle]:
        return [_V2Handle(p) for p in sorted(self.base.glob(f"{prefix}*")) if p.is_dir()]

    def create(
        self, name: str, cores: tuple[int, ...], memory_mb: int, pids_max: int = 0
    ) -> CgroupHandle:
        directory = self.base / name
        directory.mkdir()
        try:
            _write(directory / "cpuset.cpus", format_cpu_list(cores))
            _write(directory / "memory.max", str(memory_mb * 2**20) if memory_mb > 0 else "max")
            _write(directory / "cpu.max", f"{len(cores) * CFS_PERIOD_US} {CFS_PERIOD_US}")
            if self.limits_pids:
                _write(directory / "pids.max", str(pids_max) if pids_max > 0 else "max")
        except OSError:
            _rmdir(directory)
            raise
        return _V2Handle(directory)


def _probe(driver: CgroupDriver) -> None:
    """Create and remove one cgroup to prove the driver can write what it needs."""
    cores = tuple(sorted(os.sched_getaffinity(0)))[:1]
    handle = driver.create(f"probe-{uuid.uuid4().hex[:8]}", cores, 64, 64)
    handle.remove()


def detect_cgroup_driver(
    node_id: str, *, v2_root: Path | None = None, mount: Path = Path("/sys/fs/cgroup")
) -> CgroupDriver | None:
    """The first cgroup driver that works here (v2 delegated root, v1), or None for affinity."""
    candidates: list[tuple[str, object]] = []
    if v2_root is not None:
        candidates.append(("v2", v2_root))
    elif (mount / "cgroup.controllers").exists():  # a pure v2 host
        candidates.append(("v2", mount))
    if (mount / "cpuset" / "cpuset.cpus").exists():
        candidates.append(("v1", mount))
    for kind, where in candidates:
        try:
            driver: CgroupDriver = (
                CgroupV2Driver(node_id, Path(str(where)))
                if kind == "v2"
                else CgroupV1Driver(node_id, Path(str(where)))
            )
            _probe(driver)
        except OSError as exc:
            logger.warning("cgroup %s at %s unusable (%s)", kind, where, exc)
            continue
        logger.info("using cgroup %s at %s", kind, where)
        return driver
    logger.warning("no writable cgroup hierarchy: falling back to CPU affinity")
    return None
