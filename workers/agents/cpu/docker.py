"""Docker backend: allocate-on-execution with one container per trajectory (arl-tangram §5.2).

The container is created on the trajectory's first action with the trajectory's memory reserved
(``--memory``) and kept between its actions (its files are the trajectory's state). Before every
exec, ``docker update --cpuset-cpus <cores> --cpus <n>`` moves it onto the cores the scheduler
allocated; then ``docker exec`` runs the command with a timeout and a capped output. Every exec'd
process carries the ``LOOM_ACTION`` marker in its environment; on exit, timeout or cancel the
agent kills whatever still carries it (found in the host's /proc, restricted to the container's
cgroup), so neither a timed-out tree nor a fork-and-leave child survives. Containers are removed
when the trajectory ends or stays idle past ``idle_ttl_s``. Talks to dockerd with the ``docker``
CLI (asyncio subprocesses): no SDK needed, and the same CLI works against any daemon.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from workers.agents.common import procs
from workers.agents.common.sysinfo import format_cpu_list
from workers.agents.cpu.backend import (
    ExecOutcome,
    ExecutionBackend,
    finish_despite_cancel,
    safe_name,
    supervise,
)
from workers.transport.messages import Dispatch

logger = logging.getLogger(__name__)

_PIPE_DRAIN_S = 10.0


class DockerError(RuntimeError):
    """A docker CLI call failed (the action ends ``infra_error``)."""


@dataclass
class _Container:
    name: str
    container_id: str
    init_pid: int
    last_used: float
    busy: int = 0


class DockerBackend(ExecutionBackend):
    """Runs actions with ``docker exec`` in per-trajectory containers (see module docstring)."""

    name = "docker"

    def __init__(
        self,
        *,
        node_id: str,
        image: str,
        docker_host: str | None = None,
        docker_bin: str = "docker",
        idle_ttl_s: float = 900.0,
        network: str = "none",
        init_command: tuple[str, ...] = ("sleep", "2147483647"),
        workdir: str = "/work",
        shell: str = "/bin/sh",
        cli_timeout_s: float = 60.0,
    ) -> None:
        self.node_id = node_id
        self.image = image
        self.docker_host = docker_host
        self.docker_bin = docker_bin
        self.idle_ttl_s = idle_ttl_s
        self.network = network
        self.init_command = init_command
        self.workdir = workdir
        self.shell = shell
        self.cli_timeout_s = cli_timeout_s
        self._containers: dict[str, _Container] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._cli_env = dict(os.environ)
        if docker_host:
            self._cli_env["DOCKER_HOST"] = docker_host

    @property
    def daemon_is_local(self) -> bool:
        """Exec'd processes are visible in our /proc when dockerd is on this host."""
        host = self.docker_host or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        return host.startswith("unix://")

    async def docker(self, *args: str, timeout_s: float | None = None) -> str:
        """Run one docker CLI command; returns stdout or raises DockerError."""
        process = await asyncio.create_subprocess_exec(
            self.docker_bin,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self._cli_env,
        )
        try:
            out, err = await asyncio.wait_for(
                process.communicate(), timeout_s or self.cli_timeout_s
            )
        except TimeoutError:
            process.kill()
            await process.wait()
            raise DockerError(f"docker {args[0]} timed out") from None
        if process.returncode != 0:
            raise DockerError(f"docker {' '.join(args[:2])}: {err.decode().strip()}")
        return out.decode().strip()

    def container_name(self, key: str) -> str:
        return f"loom-{safe_name(self.node_id, 40)}-{safe_name(key, 80)}"

    async def _inspect(self, name: str) -> tuple[str, bool, int] | None:
        try:
            text = await self.docker(
                "inspect", "-f", "{{.Id}} {{.State.Running}} {{.State.Pid}}", name
            )
        except DockerError:
            return None
        container_id, running, pid = text.split()
        return container_id, running == "true", int(pid)

    async def _ensure_container(self, key: str, dispatch: Dispatch) -> _Container:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            known = self._containers.get(key)
            if known is not None:
                return known
            name = self.container_name(key)
            found = await self._inspect(name)
            if found is not None and found[1]:  # adopt (e.g. after an agent restart)
                container = _Container(name, found[0], found[2], time.time())
            else:
                if found is not None:
                    await self.docker("rm", "-f", name)
                await self._create(name, key, dispatch)
                inspected = await self._inspect(name)
                if inspected is None:
                    raise DockerError(f"container {name} vanished after creation")
                container = _Container(name, inspected[0], inspected[2], time.time())
            self._containers[key] = container
            return container

    async def _create(self, name: str, key: str, dispatch: Dispatch) -> None:
        args = [
            "run",
            "-d",
            "--name",
            name,
            "--label",
            f"loom.node={self.node_id}",
            "--label",
            f"loom.sandbox={key}",
            "--network",
            self.network,
            "--workdir",
            self.workdir,
        ]
        if dispatch.cores:
            args += ["--cpuset-cpus", format_cpu_list(dispatch.cores)]
        if dispatch.memory_mb > 0:
            memory = f"{dispatch.memory_mb}m"
            args += ["--memory", memory, "--memory-swap", memory]
        await self.docker(*args, self.image, *self.init_command)

    def _oom_kills(self, container: _Container) -> int:
        """The kernel's OOM-kill counter of the container's memory cgroup (v1 or v2)."""
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{container.init_pid}/cgroup").read_text().splitlines():
                _, controllers, path = line.split(":", 2)
                if controllers == "" or "memory" in controllers.split(","):
                    base = Path("/sys/fs/cgroup") / ("memory" if controllers else "")
                    directory = base / path.lstrip("/")
                    for name in ("memory.oom_control", "memory.events"):
                        if (directory / name).exists():
                            for row in (directory / name).read_text().splitlines():
                                if row.startswith("oom_kill "):
                                    return int(row.split()[1])
        return 0

    async def run(self, dispatch: Dispatch) -> ExecOutcome:
        started = time.time()
        key = dispatch.trajectory_id or f"action-{dispatch.key}"
        try:
            container = await self._ensure_container(key, dispatch)
            container.busy += 1
        except DockerError as exc:
            return ExecOutcome(None, b"", False, started, time.time(), infra_error=str(exc))
        try:
            if dispatch.cores:
                await self.docker(
                    "update",
                    "--cpuset-cpus",
                    format_cpu_list(dispatch.cores),
                    "--cpus",
                    str(len(dispatch.cores)),
                    container.name,
                )
            return await self._exec(dispatch, container, started)
        except DockerError as exc:
            return ExecOutcome(None, b"", False, started, time.time(), infra_error=str(exc))
        finally:
            container.busy -= 1
            container.last_used = time.time()
            if dispatch.trajectory_id is None:
                await self._remove(key)

    def _marker(self, dispatch: Dispatch) -> str:
        return f"{self.node_id}/{dispatch.key}"

    async def _exec(self, dispatch: Dispatch, container: _Container, started: float) -> ExecOutcome:
        env = {
            **dispatch.env,
            procs.MARKER_VARIABLE: self._marker(dispatch),
            "LOOM_DOP": str(dispatch.dop),
            "LOOM_CORES": ",".join(str(c) for c in dispatch.cores),
        }
        env_args = [arg for k, v in env.items() for arg in ("-e", f"{k}={v}")]
        oom_before = self._oom_kills(container)
        spawn = asyncio.create_subprocess_exec(
            self.docker_bin,
            "exec",
            *env_args,
            container.name,
            self.shell,
            "-c",
            dispatch.rendered_command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=self._cli_env,
        )
        process, cancelled = await finish_despite_cancel(spawn)
        return await supervise(
            process,
            dispatch=dispatch,
            started=started,
            spawn_cancelled=cancelled,
            kill_leftovers=lambda: self._kill_exec(dispatch, container),
            oom_killed=lambda: self._oom_kills(container) > oom_before,
            pipe_drain_s=_PIPE_DRAIN_S,
        )

    async def _kill_exec(self, dispatch: Dispatch, container: _Container) -> None:
        """Kill every process of this exec still alive (its whole tree, wherever re-parented)."""
        marker = self._marker(dispatch)
        if self.daemon_is_local:
            await self.blocking(procs.kill_marked, marker, cgroup_hint=container.container_id)
            return
        script = (
            f"for p in /proc/[0-9]*; do grep -q {shlex.quote(procs.MARKER_VARIABLE + '=' + marker)}"
            ' "$p/environ" 2>/dev/null && kill -9 "${p#/proc/}"; done; true'
        )
        with contextlib.suppress(DockerError):
            await self.docker("exec", container.name, self.shell, "-c", script)

    async def clean_lost_attempt(self, dispatch: Dispatch) -> None:
        key = dispatch.trajectory_id or f"action-{dispatch.key}"
        found = await self._inspect(self.container_name(key))
        if found is None or not found[1]:
            return
        container = _Container(self.container_name(key), found[0], found[2], time.time())
        await self._kill_exec(dispatch, container)
        if dispatch.trajectory_id is None:
            await self.docker("rm", "-f", container.name)

    async def _remove(self, key: str) -> None:
        container = self._containers.pop(key, None)
        self._locks.pop(key, None)
        name = container.name if container else self.container_name(key)
        try:
            await self.docker("rm", "-f", name)
        except DockerError as exc:
            if "No such container" not in str(exc):
                logger.error("removing %s failed: %s", name, exc)

    async def end_trajectory(self, trajectory_id: str) -> None:
        await self._remove(trajectory_id)

    async def sweep_idle(self, now: float) -> list[str]:
        idle = [
            key
            for key, c in self._containers.items()
            if c.busy == 0 and now - c.last_used > self.idle_ttl_s
        ]
        for key in idle:
            await self._remove(key)
        return idle

    async def close(self) -> None:
        for key in list(self._containers):
            await self._remove(key)
        self.stop_blocking_threads()

    async def remove_node_containers(self) -> int:
        """Remove every container labelled with this node (leftovers of a dead agent)."""
        ids = await self.docker("ps", "-aq", "--filter", f"label=loom.node={self.node_id}")
        if ids:
            await self.docker("rm", "-f", *ids.split())
        self._containers.clear()
        return len(ids.split())
