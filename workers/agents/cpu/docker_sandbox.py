"""What makes a Docker backend container a sandbox: the ``docker run`` flags, the check that a
container (new or adopted) really carries them, and the gate that keeps execs with and without
the tool network apart.

An action is untrusted code from a job key holder. Its container therefore runs as a fixed
unprivileged uid with every capability dropped and ``no-new-privileges`` (a setuid binary in the
image cannot win them back), a read-only root filesystem with a private tmpfs ``/tmp``, a pids
limit (a fork bomb stays inside it), no network unless the dispatched tool asks for it, and no
mount but its own trajectory's working directory: never the Docker socket, never a host path of
Loom's (the repository, ``var/``, secrets, other trajectories' directories). While it has the
network, the egress rules of ``sandbox_egress.py``, loaded into its own network namespace before
the network is attached, keep it off the host's addresses (the bridge's gateway included) and
private networks (``ContainerEgress``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workers.agents.cpu.sandbox import DEFAULT_PATH
from workers.agents.cpu.sandbox_egress import (
    NFT_HINT,
    EgressFilter,
    EgressUnavailable,
    allowed_from_env,
)

REPOSITORY = Path(__file__).resolve().parents[3]


class UnsafeContainer(RuntimeError):
    """A container lacks a boundary this backend promises (it is removed, never used)."""


@dataclass(frozen=True)
class SandboxPolicy:
    """How a trajectory container is confined.

    ``user``: numeric ``uid:gid`` every process of the container runs as; numeric so the image
    needs no passwd entry, and not 0. ``read_only_root``: turn off only for images whose tools
    write outside the working directory and ``/tmp`` at run time (package managers installing
    into ``/usr``); every other boundary stays. ``pids_limit``: processes and threads of the
    whole container. ``tmp_size_mb``: the tmpfs ``/tmp`` (its pages count against the
    container's memory limit).
    """

    user: str = "10001:10001"
    read_only_root: bool = True
    pids_limit: int = 1024
    tmp_size_mb: int = 512

    def __post_init__(self) -> None:
        uid, _, gid = self.user.partition(":")
        if not (uid.isdigit() and gid.isdigit()) or int(uid) == 0 or int(gid) == 0:
            raise ValueError(f"sandbox user must be a numeric non-root uid:gid, got {self.user!r}")
        if self.pids_limit < 1 or self.tmp_size_mb < 1:
            raise ValueError("pids_limit and tmp_size_mb must be >= 1")

    @property
    def uid(self) -> int:
        return int(self.user.partition(":")[0])

    @property
    def gid(self) -> int:
        return int(self.user.partition(":")[2])

    def run_args(self) -> list[str]:
        """The confinement flags of ``docker run`` (network and mounts are added by the caller)."""
        args = [
            "--user", self.user,
            "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges",
            "--pids-limit", str(self.pids_limit),
            "--tmpfs", f"/tmp:rw,nosuid,nodev,mode=1777,size={self.tmp_size_mb}m",
            "--env", "HOME=/tmp",
        ]  # fmt: skip
        if self.read_only_root:
            args.append("--read-only")
        return args


def workdir_mount_args(
    *, host_dir: Path | None, target: str, policy: SandboxPolicy, size_mb: int
) -> list[str]:
    """The trajectory's working directory: a bind of its own host directory (owned by the
    sandbox user, outside the repository) or, when dockerd cannot see our filesystem, a tmpfs
    owned by that user."""
    if host_dir is not None:
        return ["--mount", f"type=bind,source={host_dir},target={target}"]
    options = f"rw,exec,nosuid,nodev,uid={policy.uid},gid={policy.gid},size={size_mb}m"
    return ["--tmpfs", f"{target}:{options}"]


def check_outside_repository(path: Path) -> None:
    """Working directories inside the repository would hand actions Loom's configuration files
    (pytest reads the nearest ``pyproject.toml``) and a path next to ``var/``."""
    resolved = path.resolve()
    if resolved == REPOSITORY or REPOSITORY in resolved.parents:
        raise ValueError(f"sandbox working directories must live outside {REPOSITORY}: {path}")


def check_hardened(
    info: dict[str, Any], policy: SandboxPolicy, own_bind: Path | None, tool_network: str
) -> None:
    """Raise UnsafeContainer unless ``docker inspect`` shows every promised boundary.

    Run on every container before its first exec, including ones adopted after an agent
    restart (they may come from an older, looser version of this backend).
    """
    host = info.get("HostConfig") or {}
    config = info.get("Config") or {}
    problems = []
    if host.get("Privileged"):
        problems.append("privileged")
    if config.get("User") != policy.user:
        problems.append(f"user {config.get('User')!r}")
    if [c.upper() for c in host.get("CapDrop") or []] != ["ALL"] or host.get("CapAdd"):
        problems.append("capabilities not all dropped")
    if not any(o.startswith("no-new-privileges") for o in host.get("SecurityOpt") or []):
        problems.append("no no-new-privileges")
    if policy.read_only_root and not host.get("ReadonlyRootfs"):
        problems.append("writable root filesystem")
    if (host.get("PidsLimit") or 0) <= 0:
        problems.append("no pids limit")
    for mount in info.get("Mounts") or []:
        source, destination = str(mount.get("Source", "")), str(mount.get("Destination", ""))
        if "docker.sock" in source or "docker.sock" in destination:
            problems.append(f"docker socket mounted at {destination}")
        elif mount.get("Type") == "bind" and (own_bind is None or Path(source) != own_bind):
            problems.append(f"foreign bind mount {source}")
    networks = set((info.get("NetworkSettings") or {}).get("Networks") or {})
    if host.get("NetworkMode") != "none" or networks - {"none", tool_network}:
        problems.append(f"network {host.get('NetworkMode')} {sorted(networks)}")
    if problems:
        raise UnsafeContainer(f"container {info.get('Name', '?')}: {', '.join(problems)}")


def upstream_resolvers(
    files: Sequence[Path] = (Path("/etc/resolv.conf"), Path("/run/systemd/resolve/resolv.conf")),
) -> tuple[str, ...]:
    """The resolvers Docker's embedded DNS (``127.0.0.11``) forwards a container's lookups to:
    the first file's non-loopback ``nameserver`` entries, or the next file's where it names only
    a loopback stub (dockerd's own choice: systemd-resolved's upstreams). dockerd sends those
    queries from inside the container's network namespace, so the egress rules must let them
    through; loopback ones never leave it (``oifname "lo"``). Servers set by dockerd's own
    ``--dns`` are not seen here: an operator lists private ones in LOOM_SANDBOX_NETWORK_ALLOW."""
    for path in files:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        found = []
        for fields in (line.split() for line in lines):
            if len(fields) >= 2 and fields[0] == "nameserver":
                try:
                    address = ipaddress.ip_address(fields[1].partition("%")[0])
                except ValueError:
                    continue
                if not address.is_loopback:
                    found.append(str(address))
        if found:
            return tuple(found)
    return ()


class ContainerEgress:
    """Loads the egress rules into a container's network namespace before it gets a network
    (Loom's own).

    It enters the namespace through ``/proc/<container init pid>/ns/net``, so it needs a dockerd
    on this host and an agent that is root; the container, without capabilities, cannot change
    the rules. Where it cannot load them (``refusal``), network-on dispatches fail closed.
    """

    def __init__(self, *, nft: str | None, local: bool, root: bool, resolvers: Sequence[str]):
        self.filter = EgressFilter(nft=nft, dns=resolvers, allowed=allowed_from_env(), replace=True)
        self.refusal: str | None = None
        if not local:
            self.refusal = (
                "dockerd is remote, so the agent cannot enter its containers' network namespaces "
                "to load the egress rules. Fix: run the agent on the Docker host against its "
                "unix:// socket, as root"
            )
        elif not root:
            self.refusal = (
                "the agent is not root, so it cannot enter its containers' network namespaces "
                "to load the egress rules. Fix: run the agent as root"
            )
        elif nft is None:
            self.refusal = f"nft is not installed on this node. Fix: {NFT_HINT}"

    @classmethod
    def on_this_host(cls, *, nft: str | None = "auto", local: bool) -> ContainerEgress:
        """``nft``: the binary, ``"auto"`` to look it up, ``None``: there is none."""
        found = shutil.which("nft", path=DEFAULT_PATH) if nft == "auto" else nft
        return cls(nft=found, local=local, root=os.geteuid() == 0, resolvers=upstream_resolvers())

    async def apply(self, container_id: str, init_pid: int) -> None:
        """Load (or refresh: host addresses change) the rules into the namespace of the
        container whose init is ``init_pid``; raises ``EgressUnavailable`` saying why not."""
        if self.refusal is not None:
            raise EgressUnavailable(
                f"this tool has network on, but {self.refusal}; without the egress rules its "
                f"container could reach the host and its private networks"
            )
        try:
            network = os.open(f"/proc/{init_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise EgressUnavailable(f"container init {init_pid} is gone: {exc}") from None
        try:
            self._check_namespace(network, container_id, init_pid)
            await self.filter.apply(network, owner=None)
        finally:
            os.close(network)

    @staticmethod
    def _check_namespace(network: int, container_id: str, init_pid: int) -> None:
        """A recycled pid must not lead the rules anywhere else, least of all into the host's
        own namespace (they would cut the node off its private network)."""
        try:
            cgroups = Path(f"/proc/{init_pid}/cgroup").read_text()
            own = os.stat("/proc/self/ns/net")
        except OSError as exc:
            raise EgressUnavailable(f"container init {init_pid}: {exc}") from None
        found = os.fstat(network)
        if container_id not in cgroups or (found.st_dev, found.st_ino) == (own.st_dev, own.st_ino):
            raise EgressUnavailable(
                f"pid {init_pid} is no longer the init of container {container_id[:12]}"
            )


class NetworkGate:
    """Per container: execs that may use the tool network and execs that may not never overlap.

    Docker attaches networks to a container, not to a process, so the network is attached when
    an exec that needs it starts and detached before an exec that must not have it starts (it
    stays attached between network execs: a run of them pays one attach). ``attached`` is None
    when unknown (an adopted container, a toggle interrupted midway): the next exec toggles.
    """

    def __init__(self, attached: bool | None = False) -> None:
        self.attached = attached
        self._users = {True: 0, False: 0}
        self._drained = {True: asyncio.Event(), False: asyncio.Event()}
        for event in self._drained.values():
            event.set()
        self._toggle = asyncio.Lock()

    @asynccontextmanager
    async def hold(
        self, network: bool, toggle: Callable[[bool], Awaitable[None]]
    ) -> AsyncIterator[None]:
        """Wait for the other kind of exec to finish, set the network as wanted, then run."""
        async with self._toggle:
            while self._users[not network]:
                await self._drained[not network].wait()
            if self.attached is not network:
                self.attached = None
                await toggle(network)
                self.attached = network
            self._users[network] += 1
            self._drained[network].clear()
        try:
            yield
        finally:
            self._users[network] -= 1
            if self._users[network] == 0:
                self._drained[network].set()
