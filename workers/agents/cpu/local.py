"""Local backend: per-trajectory working directory, per-action process group + cgroup.

arl-tangram §5.2 (allocate-on-execution) without containers: each action runs ``sh -c`` in a new
session (its own process group) inside a fresh cgroup whose cpuset is exactly the allocated cores,
with a memory limit and a CFS quota of ``len(cores)`` CPUs. Where no cgroup hierarchy is writable,
the child is pinned with CPU affinity instead (``taskset``). On exit, timeout or cancel everything
the action started is killed: its process group, its cgroup's processes, and (affinity path) every
process carrying its ``LOOM_ACTION`` environment marker. The trajectory's working directory stays
between its actions and is removed when the trajectory ends or stays idle past ``idle_ttl_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Literal

from workers.agents.common import procs
from workers.agents.common.sysinfo import format_cpu_list
from workers.agents.cpu.backend import (
    ExecOutcome,
    ExecutionBackend,
    finish_despite_cancel,
    safe_name,
    supervise,
)
from workers.agents.cpu.cgroups import CgroupDriver, CgroupHandle, detect_cgroup_driver
from workers.transport.messages import Dispatch

logger = logging.getLogger(__name__)

_PIPE_DRAIN_S = 5.0
JOIN_FAILED_EXIT = 125
# $1 command, $2 shell, $3... cgroup.procs files to join (same pid, then exec).
_JOIN_SCRIPT = (
    'c=$1; s=$2; shift 2; for f; do echo $$ > "$f" || '
    f'{{ echo "loom: cannot join cgroup $f" >&2; exit {JOIN_FAILED_EXIT}; }}; done; '
    'exec "$s" -c "$c"'
)


class LocalBackend(ExecutionBackend):
    """Runs actions as local process groups (see module docstring)."""

    name = "local"

    def __init__(
        self,
        *,
        node_id: str,
        work_root: Path | None = None,
        cgroups: CgroupDriver | Literal["auto"] | None = "auto",
        idle_ttl_s: float = 900.0,
        shell: str = "/bin/sh",
        base_env: dict[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        self.work_root = work_root or Path(tempfile.gettempdir()) / "loom-work" / safe_name(node_id)
        self.work_root.mkdir(parents=True, exist_ok=True)
        self.cgroups = detect_cgroup_driver(node_id) if cgroups == "auto" else cgroups
        self.idle_ttl_s = idle_ttl_s
        self.shell = shell
        self.taskset = shutil.which("taskset")
        if self.cgroups is None and self.taskset is None:
            logger.warning("no cgroups and no taskset: actions will not be pinned to their cores")
        self.base_env = dict(os.environ) if base_env is None else dict(base_env)
        self._last_used: dict[str, float] = {}
        self._busy: dict[str, int] = {}

    @property
    def isolation(self) -> str:
        """``cgroup-v1``, ``cgroup-v2`` or ``affinity``."""
        return f"cgroup-v{self.cgroups.version}" if self.cgroups else "affinity"

    def trajectory_dir(self, trajectory_id: str) -> Path:
        return self.work_root / safe_name(trajectory_id)

    @staticmethod
    def _cgroup_prefix(dispatch: Dispatch) -> str:
        return f"{safe_name(dispatch.key, 60)}-"

    def _marker(self, dispatch: Dispatch) -> str:
        return f"{self.node_id}/{dispatch.key}"

    def _environment(self, dispatch: Dispatch, workdir: Path) -> dict[str, str]:
        env = {**self.base_env, **dispatch.env}
        env.update(
            {
                procs.MARKER_VARIABLE: self._marker(dispatch),
                "LOOM_DOP": str(dispatch.dop),
                "LOOM_CORES": ",".join(str(c) for c in dispatch.cores),
                "LOOM_WORKDIR": str(workdir),
                "HOME": env.get("HOME", str(workdir)),
            }
        )
        return env

    def _argv(self, dispatch: Dispatch, cgroup: CgroupHandle | None) -> list[str]:
        """The child's argv: it confines itself before the command runs (same pid, then exec).

        With a cgroup, a wrapper shell writes its own pid into the cgroup and execs the command, so
        nothing the command forks escapes and the agent never waits for the slow v1 cpuset
        attach. Without one, ``taskset`` pins the child (children inherit the affinity). No
        ``preexec_fn``: it is not fork-safe in a threaded process such as the agent.
        """
        command = dispatch.rendered_command()
        if cgroup is not None:
            join = [self.shell, "-c", _JOIN_SCRIPT, "loom-join", command, self.shell]
            return [*join, *cgroup.procs_files]
        if dispatch.cores and self.taskset is not None:
            cores = format_cpu_list(dispatch.cores)
            return [self.taskset, "-c", cores, self.shell, "-c", command]
        return [self.shell, "-c", command]

    async def run(self, dispatch: Dispatch) -> ExecOutcome:
        started = time.time()
        trajectory = dispatch.trajectory_id
        if trajectory is not None:
            workdir = self.trajectory_dir(trajectory)
            workdir.mkdir(parents=True, exist_ok=True)
            self._busy[trajectory] = self._busy.get(trajectory, 0) + 1
        else:
            workdir = Path(tempfile.mkdtemp(prefix="action-", dir=self.work_root))
        cgroup: CgroupHandle | None = None
        try:
            if self.cgroups is not None and dispatch.cores:
                name = f"{self._cgroup_prefix(dispatch)}{uuid.uuid4().hex[:6]}"
                cgroup, cancelled = await finish_despite_cancel(
                    self.blocking(self.cgroups.create, name, dispatch.cores, dispatch.memory_mb)
                )
                if cancelled:
                    raise asyncio.CancelledError
            return await self._run_process(dispatch, workdir, cgroup, started)
        finally:
            if cgroup is not None:
                await finish_despite_cancel(self.blocking(cgroup.remove))
            if trajectory is not None:
                self._busy[trajectory] -= 1
                self._last_used[trajectory] = time.time()
            else:
                shutil.rmtree(workdir, ignore_errors=True)

    async def _run_process(
        self, dispatch: Dispatch, workdir: Path, cgroup: CgroupHandle | None, started: float
    ) -> ExecOutcome:
        try:
            process, cancelled = await finish_despite_cancel(
                asyncio.create_subprocess_exec(
                    *self._argv(dispatch, cgroup),
                    cwd=workdir,
                    env=self._environment(dispatch, workdir),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        except (OSError, ValueError) as exc:
            return ExecOutcome(None, b"", False, started, time.time(), infra_error=str(exc))
        return await supervise(
            process,
            dispatch=dispatch,
            started=started,
            spawn_cancelled=cancelled,
            kill_leftovers=lambda: self.blocking(
                self._kill_everything, dispatch, process.pid, cgroup
            ),
            oom_killed=lambda: cgroup.oom_killed() if cgroup is not None else False,
            pipe_drain_s=_PIPE_DRAIN_S,
        )

    def _kill_everything(self, dispatch: Dispatch, pgid: int, cgroup: CgroupHandle | None) -> None:
        procs.kill_process_group(pgid)
        if cgroup is not None:
            cgroup.kill_all()
        else:
            procs.kill_marked(self._marker(dispatch))

    async def clean_lost_attempt(self, dispatch: Dispatch) -> None:
        """Kill processes and cgroups a dead agent left for this dispatch."""
        killed = await self.blocking(procs.kill_marked, self._marker(dispatch))
        if self.cgroups is not None:
            for leftover in self.cgroups.existing(self._cgroup_prefix(dispatch)):
                killed += await self.blocking(leftover.kill_all)
                await self.blocking(leftover.remove)
        if killed:
            logger.warning("killed %d leftover processes of %s", killed, dispatch.key)

    async def end_trajectory(self, trajectory_id: str) -> None:
        self._last_used.pop(trajectory_id, None)
        self._busy.pop(trajectory_id, None)
        await self.blocking(shutil.rmtree, self.trajectory_dir(trajectory_id), ignore_errors=True)

    async def sweep_idle(self, now: float) -> list[str]:
        idle = [
            trajectory
            for trajectory, last in self._last_used.items()
            if now - last > self.idle_ttl_s and not self._busy.get(trajectory)
        ]
        for trajectory in idle:
            await self.end_trajectory(trajectory)
        return idle

    async def close(self) -> None:
        for trajectory in list(self._last_used):
            await self.end_trajectory(trajectory)
        if self.cgroups is not None:
            self.cgroups.close()
        with contextlib.suppress(OSError):
            self.work_root.rmdir()
        self.stop_blocking_threads()
