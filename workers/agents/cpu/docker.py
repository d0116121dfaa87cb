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

Containers are sandboxes (docker_sandbox.py): a fixed non-root uid, no capabilities, read-only
root, a pids limit, no network except while a dispatch whose tool allows it runs (and then, through
nftables rules loaded into the container's own network namespace first, nothing of the host's
addresses, the bridge's gateway included, nor of private and link-local networks, cloud metadata
included, unless the operator lists them in ``LOOM_SANDBOX_NETWORK_ALLOW``; where the agent cannot
load the rules, network-on dispatches fail closed), and one mount:
the trajectory's working directory, a host directory of its own under ``work_root`` (outside the
repository) or, when dockerd is remote, a tmpfs. Only the dispatch's env and ``LOOM_*`` variables
set here reach an action; the agent's own environment never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shlex
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workers.agents.common import procs
from workers.agents.common.sysinfo import format_cpu_list
from workers.agents.cpu.backend import (
    ExecOutcome,
    ExecutionBackend,
    finish_despite_cancel,
    safe_name,
    supervise,
)
from workers.agents.cpu.docker_sandbox import (
    ContainerEgress,
    NetworkGate,
    SandboxPolicy,
    UnsafeContainer,
    check_hardened,
    check_outside_repository,
    workdir_mount_args,
)
from workers.agents.cpu.sandbox_egress import EgressUnavailable
from workers.transport.messages import Dispatch

logger = logging.getLogger(__name__)


_PIPE_DRAIN_S = 10.0
_CLI_VARIABLES = ("PATH", "HOME", "XDG_RUNTIME_DIR")  # plus DOCKER_*: what the CLI itself reads


class DockerError(RuntimeError):
    """A docker CLI call failed (the action ends ``infra_error``)."""


@dataclass
class _Container:
    name: str
    container_id: str
    init_pid: int
    last_used: float
    busy: int = 0
    network: NetworkGate = field(default_factory=NetworkGate)


class DockerBackend(ExecutionBackend):
    """Runs actions with ``docker exec`` in per-trajectory containers (see module docstring).

    ``tool_network``: the Docker network attached while a dispatch with ``network`` set runs
    (created as a bridge without inter-container traffic when missing; both the NAT to the outside
    and that isolation need dockerd's iptables). The host's loopback services (PostgreSQL, Redis,
    the API) stay out of reach, and so, through the egress rules loaded into the container's
    namespace before each attach, do the host's other addresses and private networks
    (``egress``; default: ``ContainerEgress.on_this_host``). Those rules need a local dockerd, a
    root agent and ``nft``, else network-on dispatches end ``infra_error``. Every other exec
    sees only a loopback interface of its own.

    ``host_workdirs``: give each trajectory a host directory under ``work_root`` (default: under
    the system temp dir) bound at ``workdir``; by default only when dockerd runs on this host and
    the agent is root (it hands the directory to the sandbox uid).
    Otherwise working directories are tmpfs mounts of ``tmpfs_workdir_mb``, which count against
    the container's memory limit.
    """

    name = "docker"

    def __init__(
        self,
        *,
        node_id: str,
        image: str,
        docker_host: str | None = None,
        docker_bin: str = "docker",
        idle_ttl_s: float = 900.0,
        policy: SandboxPolicy | None = None,
        tool_network: str = "loom-tools",
        work_root: Path | None = None,
        host_workdirs: bool | None = None,
        tmpfs_workdir_mb: int = 2048,
        init_command: tuple[str, ...] = ("sleep", "2147483647"),
        workdir: str = "/work",
        shell: str = "/bin/sh",
        cli_timeout_s: float = 60.0,
        egress: ContainerEgress | None = None,
    ) -> None:
        self.node_id = node_id
        self.image = image
        self.docker_host = docker_host
        self.docker_bin = docker_bin
        self.idle_ttl_s = idle_ttl_s
        self.policy = policy or SandboxPolicy()
        self.tool_network = tool_network
        self.tmpfs_workdir_mb = tmpfs_workdir_mb
        self.init_command = init_command
        self.workdir = workdir
        self.shell = shell
        self.cli_timeout_s = cli_timeout_s
        self._containers: dict[str, _Container] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tool_network_ready = False
        self._cli_env = {
            k: v for k, v in os.environ.items() if k in _CLI_VARIABLES or k.startswith("DOCKER_")
        }
        if docker_host:
            self._cli_env["DOCKER_HOST"] = docker_host
        if host_workdirs is None:
            host_workdirs = work_root is not None or (self.daemon_is_local and os.geteuid() == 0)
        if host_workdirs and work_root is None:
            work_root = Path(tempfile.gettempdir()) / "loom-docker" / safe_name(node_id)
        self.work_root = work_root.resolve() if host_workdirs and work_root else None
        if self.work_root is not None:
            check_outside_repository(self.work_root)
        self.egress = egress or ContainerEgress.on_this_host(local=self.daemon_is_local)
        if self.egress.refusal is not None:
            logger.warning("actions of network-enabled tools will fail: %s", self.egress.refusal)

    @property
    def daemon_is_local(self) -> bool:
        """Exec'd processes are visible in our /proc when dockerd is on this host."""
        host = self.docker_host or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        return host.startswith("unix://")

    async def docker(
        self, *args: str, timeout_s: float | None = None, tolerate: tuple[str, ...] = ()
    ) -> str:
        """Run one docker CLI command; returns stdout or raises DockerError (unless its message
        contains one of ``tolerate``: an idempotent call finding its work already done)."""
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
            message = err.decode().strip()
            if any(t in message for t in tolerate):
                return ""
            raise DockerError(f"docker {' '.join(args[:2])}: {message}")
        return out.decode().strip()

    def container_name(self, key: str) -> str:
        """Unique per key: ``safe_name`` alone maps distinct ids (``a/b``, ``a_b``) together,
        which would hand one trajectory another's container and files."""
        digest = hashlib.sha256(key.encode()).hexdigest()[:12]
        return f"loom-{safe_name(self.node_id, 40)}-{safe_name(key, 60)}-{digest}"

    def host_workdir(self, key: str) -> Path | None:
        """The trajectory's working directory on this host (None: a tmpfs inside the container)."""
        if self.work_root is None:
            return None
        return self.work_root / self.container_name(key)

    def _make_host_workdir(self, directory: Path) -> None:
        """Private to the sandbox uid; the parent is root-only so no host user browses them."""
        assert self.work_root is not None
        self.work_root.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chown(directory, self.policy.uid, self.policy.gid)

    def _remove_host_workdir(self, key: str) -> None:
        directory = self.host_workdir(key)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    async def _inspect(self, name: str) -> dict[str, Any] | None:
        try:
            text = await self.docker("inspect", "--type", "container", name)
        except DockerError:
            return None
        found: list[dict[str, Any]] = json.loads(text)
        return found[0] if found else None

    def _check(self, info: dict[str, Any], key: str) -> None:
        check_hardened(info, self.policy, self.host_workdir(key), self.tool_network)

    async def _ensure_container(self, key: str, dispatch: Dispatch) -> _Container:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            known = self._containers.get(key)
            if known is not None:
                return known
            name = self.container_name(key)
            found = await self._inspect(name)
            container = None
            if found is not None and found["State"]["Running"]:
                try:
                    self._check(found, key)  # adopted (an agent restart): still a sandbox?
                    container = _Container(name, found["Id"], found["State"]["Pid"], time.time())
                    container.network = NetworkGate(attached=None)  # its state is unknown
                except UnsafeContainer as exc:
                    logger.warning("replacing %s", exc)
            if container is None:
                if found is not None:
                    await self.docker("rm", "-f", name)
                container = await self._create(name, key, dispatch)
            self._containers[key] = container
            return container

    async def _create(self, name: str, key: str, dispatch: Dispatch) -> _Container:
        host_dir = self.host_workdir(key)
        if host_dir is not None:
            try:
                await self.blocking(self._make_host_workdir, host_dir)
            except OSError as exc:
                raise DockerError(f"working directory {host_dir}: {exc}") from exc
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
            "none",
            "--workdir",
            self.workdir,
            *self.policy.run_args(),
            *workdir_mount_args(
                host_dir=host_dir,
                target=self.workdir,
                policy=self.policy,
                size_mb=self.tmpfs_workdir_mb,
            ),
        ]
        if dispatch.cores:
            args += ["--cpuset-cpus", format_cpu_list(dispatch.cores)]
        if dispatch.memory_mb > 0:
            memory = f"{dispatch.memory_mb}m"
            args += ["--memory", memory, "--memory-swap", memory]
        await self.docker(*args, self.image, *self.init_command)
        info = await self._inspect(name)
        if info is None:
            raise DockerError(f"container {name} vanished after creation")
        try:
            self._check(info, key)
        except UnsafeContainer as exc:
            await self.docker("rm", "-f", name)
            raise DockerError(str(exc)) from exc
        return _Container(name, info["Id"], info["State"]["Pid"], time.time())

    async def _ensure_tool_network(self) -> None:
        if self._tool_network_ready:
            return
        try:
            await self.docker("network", "inspect", self.tool_network)
        except DockerError:
            await self.docker(
                "network", "create", "--driver", "bridge",
                "--opt", "com.docker.network.bridge.enable_icc=false",
                "--label", "loom.tool-network=1",
                self.tool_network,
                tolerate=("already exists",),
            )  # fmt: skip
        self._tool_network_ready = True

    async def _set_network(self, container: _Container, attached: bool) -> None:
        """Attach the tool network (leaving Docker's ``none`` mode first, egress rules loaded
        before) or detach it."""
        if attached:
            await self._ensure_tool_network()
            await self.egress.apply(container.container_id, container.init_pid)
            await self.docker(
                "network", "disconnect", "none", container.name, tolerate=("is not connected",)
            )
            await self.docker(
                "network", "connect", self.tool_network, container.name,
                tolerate=("already exists in network",),
            )  # fmt: skip
        else:
            await self.docker(
                "network", "disconnect", self.tool_network, container.name,
                tolerate=("is not connected", "No such network", "not found"),
            )  # fmt: skip

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
            async with container.network.hold(
                dispatch.network, lambda on: self._set_network(container, on)
            ):
                return await self._exec(dispatch, container, started)
        except (DockerError, EgressUnavailable) as exc:
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
        if found is None or not found["State"]["Running"]:
            return
        container = _Container(
            self.container_name(key), found["Id"], found["State"]["Pid"], time.time()
        )
        await self._kill_exec(dispatch, container)
        if dispatch.trajectory_id is None:
            await self._remove(key)

    async def _remove(self, key: str) -> None:
        container = self._containers.pop(key, None)
        self._locks.pop(key, None)
        name = container.name if container else self.container_name(key)
        try:
            await self.docker("rm", "-f", name)
        except DockerError as exc:
            if "No such container" not in str(exc):
                logger.error("removing %s failed: %s", name, exc)
                return  # its files stay while a container may still use them
        await self.blocking(self._remove_host_workdir, key)

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
        with contextlib.suppress(DockerError):
            await self._remove_orphan_workdirs()
        self.stop_blocking_threads()

    async def _remove_orphan_workdirs(self) -> None:
        """Remove host working directories no container of this node uses any more (a removal
        interrupted between ``docker rm`` and its directory); keep those of containers a later
        agent may adopt."""
        if self.work_root is None:
            return
        names = await self.docker(
            "ps", "-a", "--format", "{{.Names}}", "--filter", f"label=loom.node={self.node_id}"
        )
        await self.blocking(self._remove_workdirs_except, set(names.split()))

    def _remove_workdirs_except(self, names: set[str]) -> None:
        assert self.work_root is not None
        if not self.work_root.is_dir():
            return
        for directory in self.work_root.iterdir():
            if directory.name not in names:
                shutil.rmtree(directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.work_root.rmdir()  # only when empty

    async def remove_node_containers(self) -> int:
        """Remove every container labelled with this node (leftovers of a dead agent)."""
        ids = await self.docker("ps", "-aq", "--filter", f"label=loom.node={self.node_id}")
        if ids:
            await self.docker("rm", "-f", *ids.split())
        self._containers.clear()
        if self.work_root is not None:
            await self.blocking(shutil.rmtree, self.work_root, True)
        return len(ids.split())
