"""Local backend: per-trajectory working directory, per-action sandbox, process group + cgroup.

arl-tangram §5.2 (allocate-on-execution) without containers: each action runs ``sh -c`` in a new
session (its own process group) inside a fresh cgroup whose cpuset is exactly the allocated cores,
with a memory limit, a CFS quota of ``len(cores)`` CPUs and a pids limit. Where no cgroup
hierarchy is writable, the child is pinned with CPU affinity instead (``taskset``). The command
itself runs in a bubblewrap sandbox as an unprivileged user (``sandbox.py``): it sees only system
directories, its own working directory and a private ``/tmp``, with a clean environment, and a
network namespace of its own: loopback only, or, for a tool with network on, slirp4netns's
outbound network without the host's loopback (its slirp4netns is confined, and killed, with the
action). On exit, timeout or cancel everything the action started is killed: its process group,
its cgroup's processes, and (affinity path) every process carrying its ``LOOM_ACTION``
environment marker. The trajectory's working directory stays between its actions
and is removed when the trajectory ends or stays idle past ``idle_ttl_s``. Working directories
live under ``work_root`` (root-owned, mode 0711: a sandbox user cannot list it), outside Loom's
repository, so no project configuration of Loom's leaks into an action.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
from workers.agents.cpu.sandbox import (
    DEFAULT_PATH,
    WORKDIR,
    Sandbox,
    SandboxUnavailable,
    open_sandbox,
)
from workers.agents.cpu.sandbox_network import NetworkUnavailable, UserNetwork
from workers.transport.messages import Dispatch

logger = logging.getLogger(__name__)

_PIPE_DRAIN_S = 5.0
JOIN_FAILED_EXIT = 125
DEFAULT_PIDS_LIMIT = 1024
# $1 how many cgroup.procs files follow, then the files to join (same pid), then the argv to exec.
_JOIN_SCRIPT = (
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || '
    f'{{ echo "loom: cannot join cgroup $1" >&2; exit {JOIN_FAILED_EXIT}; }}; '
    'shift; n=$((n - 1)); done; exec "$@"'
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
        sandbox: Sandbox | Literal["auto"] | None = "auto",
        pids_limit: int = DEFAULT_PIDS_LIMIT,
    ) -> None:
        """``sandbox``: ``"auto"`` opens the default one (``open_sandbox``: refuses to go on
        without one unless the insecure flag is set); ``None`` runs commands unsandboxed, for
        callers that made that decision through ``open_sandbox`` themselves. ``base_env``: the
        variables every action starts from (default: PATH and LANG only — never the agent's)."""
        self.node_id = node_id
        self.work_root = work_root or Path(tempfile.gettempdir()) / "loom-work" / safe_name(node_id)
        make_private_root(self.work_root)
        self.sandbox = open_sandbox(protected=(self.work_root,)) if sandbox == "auto" else sandbox
        self.pids_limit = pids_limit
        self.cgroups = detect_cgroup_driver(node_id) if cgroups == "auto" else cgroups
        self.idle_ttl_s = idle_ttl_s
        self.shell = shell
        self.taskset = shutil.which("taskset")
        if self.cgroups is None and self.taskset is None:
            logger.warning("no cgroups and no taskset: actions will not be pinned to their cores")
        self.base_env = dict(base_env) if base_env is not None else clean_environment()
        self._last_used: dict[str, float] = {}
        self._busy: dict[str, int] = {}

    @property
    def isolation(self) -> str:
        """``cgroup-v1``, ``cgroup-v2`` or ``affinity``."""
        return f"cgroup-v{self.cgroups.version}" if self.cgroups else "affinity"

    @property
    def sandboxed(self) -> bool:
        return self.sandbox is not None

    @property
    def fallback_nproc(self) -> int:
        """Where no pids cgroup exists, RLIMIT_NPROC caps the sandbox user instead. The kernel
        counts it per uid across the host, not per action: one action per core may each hold
        ``pids_limit``, so that a fork bomb exhausts the sandbox user's share, never the host's,
        and ordinary actions beside it still start."""
        return self.pids_limit * max(1, os.cpu_count() or 1)

    def trajectory_dir(self, trajectory_id: str) -> Path:
        return self.work_root / safe_name(trajectory_id)

    @staticmethod
    def _cgroup_prefix(dispatch: Dispatch) -> str:
        return f"{safe_name(dispatch.key, 60)}-"

    def _marker(self, dispatch: Dispatch) -> str:
        return f"{self.node_id}/{dispatch.key}"

    def _environment(self, dispatch: Dispatch, workdir: Path) -> dict[str, str]:
        """A clean environment: nothing of the agent's (database URL, keys) reaches an action."""
        inside = WORKDIR if self.sandbox is not None else str(workdir)
        env = {**self.base_env, "HOME": inside, "TMPDIR": "/tmp", **dispatch.env}
        env.update(
            {
                procs.MARKER_VARIABLE: self._marker(dispatch),
                "LOOM_DOP": str(dispatch.dop),
                "LOOM_CORES": ",".join(str(c) for c in dispatch.cores),
                "LOOM_WORKDIR": inside,
            }
        )
        return env

    def _argv(
        self,
        dispatch: Dispatch,
        workdir: Path,
        cgroup: CgroupHandle | None,
        network: UserNetwork | None,
    ) -> list[str]:
        """The child's argv: it confines itself before the command runs (``_confined``)."""
        command = [self.shell, "-c", dispatch.rendered_command()]
        if self.sandbox is not None:
            has_pids_cgroup = cgroup is not None and bool(self.cgroups and self.cgroups.limits_pids)
            command = self.sandbox.wrap(
                command,
                workdir=workdir,
                network=dispatch.network,
                nproc=None if has_pids_cgroup else self.fallback_nproc,
                user_network=network,
            )
        return self._confined(dispatch, cgroup, command)

    def _confined(
        self, dispatch: Dispatch, cgroup: CgroupHandle | None, command: list[str]
    ) -> list[str]:
        """``command`` prefixed so that it confines itself (same pid, then exec).

        With a cgroup, a wrapper shell writes its own pid into the cgroup and execs the command,
        so nothing the command forks escapes and the agent never waits for the slow v1 cpuset
        attach. Without one, ``taskset`` pins the child (children inherit the affinity). No
        ``preexec_fn``: it is not fork-safe in a threaded process such as the agent.
        """
        if cgroup is not None:
            files = cgroup.procs_files
            return [self.shell, "-c", _JOIN_SCRIPT, "loom-join", str(len(files)), *files, *command]
        if dispatch.cores and self.taskset is not None:
            return [self.taskset, "-c", format_cpu_list(dispatch.cores), *command]
        return command

    def _make_workdir(self, workdir: Path) -> None:
        if not workdir.is_dir():
            workdir.mkdir()
            if self.sandbox is not None:
                self.sandbox.own(workdir)

    async def run(self, dispatch: Dispatch) -> ExecOutcome:
        started = time.time()
        trajectory = dispatch.trajectory_id
        if trajectory is not None:
            workdir = self.trajectory_dir(trajectory)
            self._make_workdir(workdir)
            self._busy[trajectory] = self._busy.get(trajectory, 0) + 1
        else:
            workdir = Path(tempfile.mkdtemp(prefix="action-", dir=self.work_root))
            if self.sandbox is not None:
                self.sandbox.own(workdir)
        cgroup: CgroupHandle | None = None
        try:
            if self.cgroups is not None and dispatch.cores:
                name = f"{self._cgroup_prefix(dispatch)}{uuid.uuid4().hex[:6]}"
                cgroup, cancelled = await finish_despite_cancel(
                    self.blocking(
                        self.cgroups.create,
                        name,
                        dispatch.cores,
                        dispatch.memory_mb,
                        self.pids_limit,
                    )
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
        network: UserNetwork | None = None
        try:
            if dispatch.network and self.sandbox is not None:
                network = self.sandbox.user_network()
        except (SandboxUnavailable, OSError) as exc:  # fail closed, never the host's network
            return ExecOutcome(None, b"", False, started, time.time(), infra_error=str(exc))
        try:
            return await self._spawn(dispatch, workdir, cgroup, started, network)
        finally:
            if network is not None:
                await finish_despite_cancel(network.stop())

    async def _spawn(
        self,
        dispatch: Dispatch,
        workdir: Path,
        cgroup: CgroupHandle | None,
        started: float,
        network: UserNetwork | None,
    ) -> ExecOutcome:
        try:
            process, cancelled = await finish_despite_cancel(
                asyncio.create_subprocess_exec(
                    *self._argv(dispatch, workdir, cgroup, network),
                    cwd=workdir,
                    env=self._environment(dispatch, workdir),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    pass_fds=network.pass_fds if network is not None else (),
                )
            )
        except (OSError, ValueError) as exc:
            return ExecOutcome(None, b"", False, started, time.time(), infra_error=str(exc))

        async def kill_leftovers() -> None:
            await self.blocking(self._kill_everything, dispatch, process.pid, cgroup)

        network_failure = None
        if network is not None and not cancelled:
            network_failure, cancelled = await finish_despite_cancel(
                self._connect(dispatch, cgroup, network)
            )
            if network_failure is not None:
                await kill_leftovers()  # its command never ran
        outcome = await supervise(
            process,
            dispatch=dispatch,
            started=started,
            spawn_cancelled=cancelled,
            kill_leftovers=kill_leftovers,
            oom_killed=lambda: cgroup.oom_killed() if cgroup is not None else False,
            pipe_drain_s=_PIPE_DRAIN_S,
        )
        if network_failure is not None:
            return dataclasses.replace(outcome, infra_error=network_failure)
        return outcome

    async def _connect(
        self, dispatch: Dispatch, cgroup: CgroupHandle | None, network: UserNetwork
    ) -> str | None:
        """Start the action's slirp4netns, confined as the action is; the failure, if any."""
        env = {"PATH": DEFAULT_PATH, procs.MARKER_VARIABLE: self._marker(dispatch)}
        try:
            await network.start(prefix=self._confined(dispatch, cgroup, []), env=env)
        except (NetworkUnavailable, OSError) as exc:
            return f"network of this action: {exc}"
        return None

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
        if self.sandbox is not None:
            self.sandbox.close()
        with contextlib.suppress(OSError):
            self.work_root.rmdir()
        self.stop_blocking_threads()


def clean_environment() -> dict[str, str]:
    """What every action's environment starts from: a standard PATH and a UTF-8 locale."""
    return {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}


def make_private_root(work_root: Path) -> None:
    """Create the work root; as root, make it root-owned 0711 so that a sandbox user can reach
    its own directory by name (unsandboxed fallback) but never list the others."""
    work_root.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chown(work_root, 0, 0)
        work_root.chmod(0o711)
