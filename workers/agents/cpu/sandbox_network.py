"""The network of a sandboxed action whose tool has ``network`` on: a namespace of its own that
slirp4netns connects to the outside, never to the host's loopback (``sandbox.py``'s docstring
says why and how it ends with the action)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
from collections.abc import Sequence

from workers.agents.cpu.backend import read_capped
from workers.agents.cpu.sandbox_egress import EgressFilter, EgressUnavailable

NETWORK_DEVICE = "tap0"
NETWORK_DNS = "10.0.2.3"  # slirp's resolver, relaying to the host's
_NETWORK_START_TIMEOUT_S = 10.0
_NETWORK_STDERR_CAP = 4096
_NS_GET_USERNS = 0xB701  # linux/nsfs.h: _IO(0xb7, 0x1)


class NetworkUnavailable(RuntimeError):
    """This action's network could not be set up; the message says what failed."""


def _namespace_owner(network: int) -> int:
    """A descriptor of the user namespace owning a network namespace (``NS_GET_USERNS``): in
    userns mode, bwrap's, which is the parent of the one ``--disable-userns`` leaves its
    processes in; slirp4netns must join that one to enter the network namespace."""
    return fcntl.ioctl(network, _NS_GET_USERNS)


class UserNetwork:
    """One network-on action's link to the outside: slirp4netns on the action's own namespace.

    bwrap reports its child's pid on ``--info-fd`` and holds the command back on ``--block-fd``;
    ``start`` attaches slirp4netns to that pid's namespace, waits until it has configured
    ``tap0`` (address, default route; ``--ready-fd``) and only then lets the command run. Before
    slirp4netns starts, ``egress`` has filtered where the namespace's connections may go
    (``sandbox_egress.py``). The
    agent holds the only write end of slirp4netns's ``--exit-fd``: if the agent dies, so does
    slirp4netns. ``stop`` kills and reaps it; call it on every path once the action has ended.
    """

    def __init__(self, slirp4netns: str, *, join_userns: bool, egress: EgressFilter) -> None:
        self.slirp4netns = slirp4netns
        self.egress = egress
        self.join_userns = join_userns  # userns mode: the namespace belongs to bwrap's userns
        self.process: asyncio.subprocess.Process | None = None
        self._stderr: asyncio.Task[tuple[bytes, bool]] | None = None
        self._info_read, self._info_write = os.pipe()
        self._block_read, self._block_write = os.pipe()
        self._exit_write: int | None = None
        self._open = {self._info_read, self._info_write, self._block_read, self._block_write}

    def bwrap_args(self) -> list[str]:
        return ["--info-fd", str(self._info_write), "--block-fd", str(self._block_read)]

    @property
    def pass_fds(self) -> tuple[int, int]:
        """The descriptors the sandbox's process must inherit."""
        return self._info_write, self._block_read

    def _close(self, fd: int | None) -> None:
        if fd is not None and fd in self._open:
            self._open.discard(fd)
            os.close(fd)

    async def start(self, *, prefix: Sequence[str] = (), env: dict[str, str]) -> None:
        """After the sandbox was spawned: connect its namespace, then release its command.
        ``prefix`` confines slirp4netns as the action is (cgroup join, affinity); ``env`` carries
        the action's marker. Raises ``NetworkUnavailable`` naming what failed."""
        self._close(self._info_write)  # the sandbox holds these now
        self._close(self._block_read)
        try:
            async with asyncio.timeout(_NETWORK_START_TIMEOUT_S):
                network = self._open_namespace(await self._read(self._info_read, -1))
                owner = self._open_owner(network) if self.join_userns else None
                await self.egress.apply(network, owner=owner)
                ready = await self._spawn(network, owner, prefix, env)
        except TimeoutError:
            raise NetworkUnavailable("slirp4netns did not configure the network in time") from None
        except EgressUnavailable as exc:
            raise NetworkUnavailable(str(exc)) from None
        if ready != b"1":
            await self._end()  # the command stays held back until the caller kills it
            assert self._stderr is not None
            detail = (await self._stderr)[0].decode(errors="replace").strip()[-500:]
            raise NetworkUnavailable(f"slirp4netns failed: {detail or 'no message'}")
        os.write(self._block_write, b"1")
        self._close(self._block_write)

    def _open_namespace(self, info: bytes) -> int:
        """The sandbox's network namespace, held open: slirp4netns gets this descriptor, not a
        pid that could be reused meanwhile, and never the agent's own namespace."""
        try:
            report = json.loads(info)
            pid = int(report["child-pid"])
        except (ValueError, KeyError, TypeError):
            raise NetworkUnavailable("bwrap did not start (no child pid)") from None
        try:
            network = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            raise NetworkUnavailable("the sandbox ended before its network was up") from None
        self._open.add(network)
        inode = os.fstat(network).st_ino
        if inode == os.stat("/proc/self/ns/net").st_ino or inode != report.get(
            "net-namespace", inode
        ):
            raise NetworkUnavailable("the sandbox has no network namespace of its own")
        return network

    def _open_owner(self, network: int) -> int:
        owner = _namespace_owner(network)
        self._open.add(owner)
        return owner

    async def _spawn(
        self, network: int, owner: int | None, prefix: Sequence[str], env: dict[str, str]
    ) -> bytes:
        """Start slirp4netns on the namespace; what it writes on its ready descriptor."""
        ready_read, ready_write = os.pipe()
        exit_read, self._exit_write = os.pipe()
        self._open |= {ready_read, ready_write, exit_read, self._exit_write}
        argv = [*prefix, self.slirp4netns, "--configure", "--mtu", "65520"]
        argv += ["--disable-host-loopback", "--enable-seccomp", "--netns-type=path"]
        argv += [f"--ready-fd={ready_write}", f"--exit-fd={exit_read}"]
        passed = [network, ready_write, exit_read]
        if owner is None:  # root: an empty root of its own, capabilities dropped
            argv.append("--enable-sandbox")
        else:  # as the agent's uid, which cannot make the mount namespace that needs
            passed.append(owner)
            argv.append(f"--userns-path=/proc/self/fd/{owner}")
        self.process = await asyncio.create_subprocess_exec(
            *argv,
            f"/proc/self/fd/{network}",
            NETWORK_DEVICE,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            pass_fds=passed,
            start_new_session=True,
        )
        for fd in passed:
            self._close(fd)
        assert self.process.stderr is not None
        self._stderr = asyncio.create_task(read_capped(self.process.stderr, _NETWORK_STDERR_CAP))
        return await self._read(ready_read, 1)

    async def _read(self, fd: int, size: int) -> bytes:
        """Up to ``size`` bytes (``-1``: to end of file) from a pipe, without blocking the loop."""
        self._open.discard(fd)  # the pipe transport owns and closes it
        reader = asyncio.StreamReader()
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        try:
            return await reader.read(size)
        finally:
            transport.close()

    async def stop(self) -> None:
        """Kill slirp4netns and reap it; close every descriptor left. Idempotent."""
        for fd in list(self._open):
            self._close(fd)
        await self._end()

    async def _end(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        if self._stderr is not None:
            await self._stderr
