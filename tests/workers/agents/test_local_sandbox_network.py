"""The local sandbox's network, proven from inside real actions (bubblewrap, slirp4netns).

A tool with network off has loopback only. With it on, the action has a network namespace of its
own that slirp4netns connects to the outside: the host's loopback services (database, Redis)
stay out of reach, and so do the host's other addresses and private networks unless the operator
allows them, and slirp4netns
ends with the action whatever ends it. Without slirp4netns, network-on actions fail unless the
operator opted into the host's network. Skipped, with the reason printed, where bubblewrap or
slirp4netns cannot run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.workers.agents.conftest import (
    cpu_dispatch,
    leftover_processes,
    skip_unless_bwrap_runs,
    unique_node_id,
    wait_until,
)
from workers.agents.common import procs
from workers.agents.cpu.backend import safe_name
from workers.agents.cpu.local import LocalBackend
from workers.agents.cpu.sandbox import (
    DEFAULT_PATH,
    HOST_NETWORK_VARIABLE,
    Sandbox,
    SandboxUnavailable,
)
from workers.agents.cpu.sandbox_egress import ALLOW_VARIABLE
from workers.agents.cpu.sandbox_network import NETWORK_DEVICE, NETWORK_DNS

REPOSITORY = Path(__file__).resolve().parents[3]
_PROBE = """python3 -c '
import socket, sys
for host in sys.argv[1:-1]:
    try:
        print(host, socket.create_connection((host, int(sys.argv[-1])), 3).recv(64).decode())
    except OSError as exc:
        print(host, "failed", exc)
' """


@pytest.fixture(scope="module", autouse=True)
def _bwrap_runs() -> None:
    skip_unless_bwrap_runs("local sandbox network tests")


@pytest.fixture
def node_id(request: pytest.FixtureRequest) -> str:
    return unique_node_id(request, "net")


@pytest.fixture
def slirp4netns() -> None:
    if shutil.which("slirp4netns", path=DEFAULT_PATH) is None:
        print("local sandbox network test skipped: no slirp4netns")
        pytest.skip("slirp4netns is not installed (apt-get install slirp4netns)")


@pytest.fixture
async def backend(tmp_path: Path, node_id: str, slirp4netns: None) -> AsyncIterator[LocalBackend]:
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "work")
    yield local
    await local.close()


def _host_address() -> str | None:
    """A non-loopback IPv4 address of this host: the source of its route outwards (a UDP
    connect sends nothing), else what its name resolves to."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect(("203.0.113.1", 9))
        address = str(udp.getsockname()[0])
        if not address.startswith("127.") and address != "0.0.0.0":
            return address
    with contextlib.suppress(OSError):
        address = socket.gethostbyname(socket.gethostname())
        if not address.startswith("127."):
            return address
    return None


@contextlib.asynccontextmanager
async def _listener(host: str) -> AsyncIterator[tuple[int, str]]:
    """A TCP server on ``host`` greeting whoever connects: (port, greeting)."""
    greeting = f"hello-{uuid.uuid4().hex[:6]}"

    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(greeting.encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(greet, host, 0)
    try:
        yield server.sockets[0].getsockname()[1], greeting
    finally:
        server.close()
        await server.wait_closed()


async def _probe(local: LocalBackend, hosts: list[str], port: int, **fields: object) -> str:
    command = _PROBE + " ".join([*hosts, str(port)])
    outcome = await local.run(cpu_dispatch(uuid.uuid4().hex[:8], command, **fields))
    assert outcome.exit_code == 0 and outcome.infra_error is None, outcome
    return outcome.output.decode()


def _slirp_children() -> list[int]:
    """slirp4netns processes whose parent is this process, zombies (unreaped) included."""
    found = []
    for entry in procs.PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            status = (entry / "status").read_text()
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if fields["Name"].strip() == "slirp4netns" and int(fields["PPid"]) == os.getpid():
                found.append(int(entry.name))
    return found


def _marked_slirps(marker: str) -> list[int]:
    found = []
    for pid in procs.marked_pids(marker):
        with contextlib.suppress(OSError):
            if (procs.PROC / str(pid) / "comm").read_text().strip() == "slirp4netns":
                found.append(pid)
    return found


async def test_host_loopback_is_out_of_reach_with_network_off_and_on(
    backend: LocalBackend,
) -> None:
    """The database and Redis listen there: not through 127.0.0.1 (the sandbox's own loopback)
    nor through slirp's gateway 10.0.2.2 (which would otherwise lead to the host's)."""
    async with _listener("127.0.0.1") as (port, greeting):
        off = await _probe(backend, ["127.0.0.1"], port)
        on = await _probe(backend, ["127.0.0.1", "10.0.2.2"], port, network=True)
    assert greeting not in off and greeting not in on, (off, on)
    assert "refused" in off.lower(), off
    lines = on.splitlines()
    assert lines[0].startswith("127.0.0.1 failed") and "refused" in lines[0].lower(), on
    assert lines[1].startswith("10.0.2.2 failed"), on


async def test_network_on_keeps_the_host_and_private_networks_out_of_reach(
    backend: LocalBackend,
) -> None:
    """The host's other addresses (a service bound to 0.0.0.0), slirp's private range and the
    cloud metadata address are rejected at once by the action's egress rules, not waited out."""
    address = _host_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    async with _listener(address) as (port, greeting):
        started = asyncio.get_running_loop().time()
        on = await _probe(backend, [address, "169.254.169.254", "10.0.2.2"], port, network=True)
        elapsed = asyncio.get_running_loop().time() - started
    assert greeting not in on, on
    assert [line.split()[1] for line in on.splitlines()] == ["failed"] * 3, on
    assert elapsed < 3.0, f"rejected, not dropped: the probe took {elapsed:.1f} s"


async def test_network_on_reaches_what_the_operator_allows(
    tmp_path: Path, node_id: str, slirp4netns: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outbound connections work (offline, a listener on the host's own non-loopback address,
    allowed by the operator, stands for the world); with network off it is out of reach."""
    address = _host_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    monkeypatch.setenv(ALLOW_VARIABLE, f"{address}/32")
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "work")
    try:
        async with _listener(address) as (port, greeting):
            on = await _probe(local, [address], port, network=True)
            off = await _probe(local, [address], port)
    finally:
        await local.close()
    assert on == f"{address} {greeting}\n", on
    assert greeting not in off and "failed" in off, off


async def test_without_nft_network_on_fails_closed(
    tmp_path: Path, node_id: str, slirp4netns: None
) -> None:
    sandbox = Sandbox()
    sandbox.egress.nft = None
    assert sandbox.network_mode == "refused"
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "w", sandbox=sandbox)
    try:
        refused = await local.run(cpu_dispatch("on", "touch ran", network=True))
    finally:
        await local.close()
    assert refused.exit_code is None and refused.infra_error is not None
    assert "apt-get install nftables" in refused.infra_error, refused.infra_error
    assert not (tmp_path / "w" / "t" / "ran").exists()


def test_a_malformed_allow_list_stops_the_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ALLOW_VARIABLE, "10.0.0.0/8, not-a-network")
    with pytest.raises(SandboxUnavailable, match=f"{ALLOW_VARIABLE}: 'not-a-network'"):
        Sandbox()


async def test_network_on_has_its_own_interface_and_resolver(backend: LocalBackend) -> None:
    probe = (
        'python3 -c "import socket; print(sorted(n for _, n in socket.if_nameindex())); '
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.connect(('10.0.2.2', 9)); "
        'print(u.getsockname()[0])"; cat /etc/resolv.conf'
    )
    on = await backend.run(cpu_dispatch("on", probe, network=True))
    assert on.exit_code == 0, on.output
    names, address, *resolver = on.output.decode().splitlines()
    assert names == str(sorted(["lo", NETWORK_DEVICE])), names
    assert address == "10.0.2.100", address  # configured before the command started
    assert resolver == [f"nameserver {NETWORK_DNS}"], resolver
    off = await backend.run(cpu_dispatch("off", probe))
    assert "['lo']" in off.output.decode().splitlines(), off.output
    assert f"nameserver {NETWORK_DNS}" not in off.output.decode()


async def test_slirp4netns_ends_with_the_action(backend: LocalBackend) -> None:
    """Exit, timeout and cancel: it runs within the action's cgroup while the action runs,
    and afterwards neither it nor its zombie is left."""
    ended = await backend.run(cpu_dispatch("exit", "true", network=True))
    assert ended.exit_code == 0, ended.output
    assert _slirp_children() == [] and leftover_processes(f"{backend.node_id}/") == []

    timed = await backend.run(cpu_dispatch("slow", "sleep 30", network=True, timeout_s=1.0))
    assert timed.timed_out
    assert _slirp_children() == [] and leftover_processes(f"{backend.node_id}/") == []

    marker = f"{backend.node_id}/cancel:1"
    running = asyncio.create_task(
        backend.run(cpu_dispatch("cancel", "sleep 30", network=True, timeout_s=30))
    )
    try:
        await wait_until(lambda: len(_marked_slirps(marker)) == 1, 10)
        (slirp,) = _marked_slirps(marker)
        if backend.cgroups is not None:
            cgroups = (procs.PROC / str(slirp) / "cgroup").read_text()
            assert safe_name("cancel:1", 60) in cgroups, cgroups
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    assert _slirp_children() == [] and _marked_slirps(marker) == []
    assert procs.marked_pids(marker) == []


_CRASHING_AGENT = """
import asyncio, sys
from pathlib import Path
from tests.workers.agents.conftest import cpu_dispatch
from workers.agents.cpu.local import LocalBackend

async def main():
    local = LocalBackend(node_id=sys.argv[1], work_root=Path(sys.argv[2]), cgroups=None)
    await local.run(cpu_dispatch("crash", "sleep 60", network=True, timeout_s=60))

asyncio.run(main())
"""


@pytest.fixture
def crashing_agent(
    tmp_path: Path, node_id: str, slirp4netns: None
) -> Iterator[subprocess.Popen[bytes]]:
    agent = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_AGENT, node_id, str(tmp_path / "crash")],
        cwd=REPOSITORY,
        env={**os.environ, "PYTHONPATH": str(REPOSITORY)},
    )
    try:
        yield agent
    finally:
        agent.kill()
        agent.wait()
        procs.kill_marked(f"{node_id}/crash:1")  # whatever a failed test leaves
        shutil.rmtree(tmp_path / "crash", ignore_errors=True)


async def test_slirp4netns_does_not_outlive_a_dead_agent(
    crashing_agent: subprocess.Popen[bytes], node_id: str
) -> None:
    """Killed without any cleanup of its own: the sandbox dies with its parent, slirp4netns
    with the agent's end of its exit pipe."""
    marker = f"{node_id}/crash:1"
    await wait_until(lambda: len(_marked_slirps(marker)) == 1, 30)
    await wait_until(lambda: any(_sleeps(marker)), 10)
    os.kill(crashing_agent.pid, signal.SIGKILL)
    await wait_until(lambda: procs.marked_pids(marker) == [], 10)


def _sleeps(marker: str) -> list[int]:
    return [
        pid
        for pid in procs.marked_pids(marker)
        if (procs.PROC / str(pid) / "comm").read_text().strip() == "sleep"
    ]


async def test_without_slirp4netns_network_on_fails_closed(
    tmp_path: Path, node_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOST_NETWORK_VARIABLE, raising=False)
    sandbox = Sandbox(slirp4netns=None)
    assert sandbox.network_mode == "refused"
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "w", sandbox=sandbox)
    try:
        refused = await local.run(cpu_dispatch("on", "touch ran", network=True))
        off = await local.run(cpu_dispatch("off", "echo fine"))
    finally:
        await local.close()
    assert refused.exit_code is None and refused.infra_error is not None
    assert "apt-get install slirp4netns" in refused.infra_error, refused.infra_error
    assert HOST_NETWORK_VARIABLE in refused.infra_error
    assert not (tmp_path / "w" / "t" / "ran").exists()
    assert off.exit_code == 0 and off.output == b"fine\n"


async def test_a_failing_slirp4netns_fails_the_action_before_its_command_runs(
    tmp_path: Path, node_id: str
) -> None:
    broken = tmp_path / "slirp4netns"
    broken.write_text("#!/bin/sh\necho 'open(\"/dev/net/tun\"): No such device' >&2\nexit 1\n")
    broken.chmod(0o755)
    local = LocalBackend(
        node_id=node_id, work_root=tmp_path / "w", sandbox=Sandbox(slirp4netns=str(broken))
    )
    try:
        failed = await local.run(cpu_dispatch("on", "touch ran", network=True))
    finally:
        await local.close()
    assert failed.infra_error is not None and "/dev/net/tun" in failed.infra_error, failed
    assert not (tmp_path / "w" / "t" / "ran").exists()
    assert leftover_processes(f"{node_id}/") == []


async def test_host_network_only_by_the_operators_explicit_choice(
    tmp_path: Path, node_id: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The flag shares the host's network where slirp4netns is missing, loudly; where it is
    present, the flag changes nothing."""
    monkeypatch.setenv(HOST_NETWORK_VARIABLE, "1")
    with caplog.at_level(logging.CRITICAL):
        sandbox = Sandbox(slirp4netns=None)
    assert sandbox.network_mode == "host"
    assert any("HOST's network" in r.getMessage() for r in caplog.records)
    local = LocalBackend(node_id=node_id, work_root=tmp_path / "w", sandbox=sandbox)
    try:
        async with _listener("127.0.0.1") as (port, greeting):
            shared = await _probe(local, ["127.0.0.1"], port, network=True)
    finally:
        await local.close()
    assert shared == f"127.0.0.1 {greeting}\n", shared
    present = Sandbox(slirp4netns="/usr/bin/slirp4netns")
    try:
        assert present.network_mode == "slirp4netns"
    finally:
        present.close()
