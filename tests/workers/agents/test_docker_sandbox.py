"""Docker backend sandbox boundaries, each proven from inside an action on a real dockerd:
non-root uid and no capabilities (seen inside and in the host's /proc), read-only root, nothing of
Loom's or of other trajectories reachable, no /proc escape, network only when the tool allows it
(where it may go: test_docker_egress.py),
fork bombs held by the pids limit, no Docker socket, no environment leak from the agent."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import sqlite3
import subprocess
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.workers.agents.conftest import cpu_dispatch, leftover_processes
from workers.agents.cpu import DockerBackend
from workers.agents.cpu.backend import ExecOutcome
from workers.agents.cpu.docker_sandbox import REPOSITORY, SandboxPolicy
from workers.agents.cpu.sandbox_egress import ALLOW_VARIABLE
from workers.testing.dockerd import DockerDaemon
from workers.transport import Dispatch

pytestmark = pytest.mark.docker

POLICY = SandboxPolicy(pids_limit=64)
UID = POLICY.uid


def _dispatch(action: str, command: str, **fields: Any) -> Dispatch:
    return cpu_dispatch(action, command, **{"timeout_s": 20.0, **fields})


async def _run(backend: DockerBackend, command: str, **fields: Any) -> str:
    """Run one action; returns its output (fails the test on an infrastructure error)."""
    outcome = await backend.run(_dispatch(f"a-{uuid.uuid4().hex[:8]}", command, **fields))
    assert outcome.infra_error is None, outcome.infra_error
    return outcome.output.decode()


def _make_backend(daemon: DockerDaemon, image: str, name: str, **options: Any) -> DockerBackend:
    node = f"sb-{name}-{os.getpid()}"
    return DockerBackend(
        node_id=node,
        image=image,
        docker_host=daemon.host,
        policy=options.pop("policy", POLICY),
        tool_network=f"loom-test-{os.getpid()}",
        **options,
    )


@pytest.fixture
async def backend(
    dockerd: tuple[DockerDaemon, str], request: pytest.FixtureRequest
) -> AsyncIterator[DockerBackend]:
    daemon, image = dockerd
    docker = _make_backend(daemon, image, request.node.name[5:25].replace("[", "_"))
    yield docker
    await docker.close()
    assert daemon.docker("ps", "-aq", "--filter", f"label=loom.node={docker.node_id}") == ""
    if docker.work_root is not None:
        assert not docker.work_root.exists()
    with contextlib.suppress(subprocess.CalledProcessError):
        daemon.docker("network", "rm", docker.tool_network)


def _status(pid: int) -> dict[str, str]:
    rows = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (row.partition(":") for row in rows)}


async def test_actions_run_as_an_unprivileged_uid_without_capabilities(
    backend: DockerBackend, dockerd: tuple[DockerDaemon, str]
) -> None:
    daemon, _ = dockerd
    capabilities = "grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status"
    inside = await _run(backend, f"id -u; id -g; {capabilities}; chroot / true || echo no-chroot")
    lines = [line for line in inside.split("\n") if not line.startswith("chroot:")]
    assert lines[:2] == [str(UID), str(POLICY.gid)]
    assert "CapEff:\t0000000000000000" in lines and "CapBnd:\t0000000000000000" in lines
    assert "NoNewPrivs:\t1" in lines and "no-chroot" in lines

    sleeper = asyncio.create_task(backend.run(_dispatch("sleeper", "sleep 30", timeout_s=1.5)))
    deadline = time.monotonic() + 10
    while not (pids := leftover_processes(f"{backend.node_id}/sleeper:")):
        assert time.monotonic() < deadline, "the action's process never showed up"
        await asyncio.sleep(0.05)
    for pid in pids:  # seen from the host, not from the container's own view
        status = _status(pid)
        assert status["Uid"].split() == [str(UID)] * 4
        assert status["CapEff"] == status["CapPrm"] == "0000000000000000"
    assert (await sleeper).timed_out
    [container] = daemon.docker(
        "ps", "-q", "--filter", f"label=loom.node={backend.node_id}"
    ).split()
    info = json.loads(daemon.docker("inspect", container))[0]
    assert _status(info["State"]["Pid"])["Uid"].split()[0] == str(UID)
    assert info["HostConfig"]["Privileged"] is False


async def test_root_is_read_only_and_only_work_and_tmp_are_writable(
    backend: DockerBackend,
) -> None:
    out = await _run(backend, "for p in /x /usr/x /etc/passwd /var/tmp/x /work/x /tmp/x; do "
                     "touch $p 2>/dev/null && echo wrote $p || echo refused $p; done; "
                     "stat -c '%u %a' /work")  # fmt: skip
    assert out.split("\n")[:-2] == [
        "refused /x", "refused /usr/x", "refused /etc/passwd", "refused /var/tmp/x",
        "wrote /work/x", "wrote /tmp/x",
    ]  # fmt: skip
    assert out.split("\n")[-2] == f"{UID} 700"  # the working directory belongs to the sandbox uid
    assert "Read-only file system" in await _run(backend, "touch /var/tmp/x 2>&1")


async def test_writable_root_is_an_explicit_option_and_keeps_the_other_boundaries(
    dockerd: tuple[DockerDaemon, str],
) -> None:
    daemon, image = dockerd
    loose = SandboxPolicy(pids_limit=64, read_only_root=False)
    backend = _make_backend(daemon, image, "rw", policy=loose)
    try:
        command = "touch /var/tmp/x && echo wrote; touch /usr/x 2>/dev/null || echo refused"
        out = await _run(backend, f"{command}; id -u; grep CapEff /proc/self/status")
        assert out.split("\n")[:3] == ["wrote", "refused", str(UID)]
        assert "CapEff:\t0000000000000000" in out
    finally:
        await backend.close()


async def test_tmpfs_working_directory_when_dockerd_cannot_see_our_files(
    dockerd: tuple[DockerDaemon, str],
) -> None:
    daemon, image = dockerd
    backend = _make_backend(daemon, image, "tmpfs", host_workdirs=False)
    try:
        assert backend.work_root is None and backend.host_workdir("t") is None
        await _run(backend, "echo kept > /work/f")
        out = await _run(backend, "cat /work/f; stat -c %u /work; grep ' /work ' /proc/mounts")
        kept, owner, mount = out.split("\n")[:3]
        assert (kept, owner, mount.split()[2]) == ("kept", str(UID), "tmpfs")
    finally:
        await backend.close()


@pytest.fixture
def loom_secrets(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Stand-ins on the host: a root-only staff key and a SQLite database under a ``var/``."""
    var = tmp_path / "var"
    var.mkdir()
    key = var / "admin_api_key"
    key.write_text(f"staff-{uuid.uuid4().hex}")
    key.chmod(0o600)
    database = var / "db.sqlite3"
    with sqlite3.connect(database) as connection:
        connection.execute("create table t (secret text)")
    yield {"key": key, "database": database, "repository": REPOSITORY / "pyproject.toml"}


async def test_other_trajectories_and_loom_files_are_out_of_reach(
    backend: DockerBackend, loom_secrets: dict[str, Path]
) -> None:
    token = f"traj-a-{uuid.uuid4().hex}"
    await _run(backend, f"echo {token} > /work/secret; echo {token} > /tmp/secret",
               trajectory_id="a")  # fmt: skip
    a_dir = backend.host_workdir("a")
    assert a_dir is not None and (a_dir / "secret").read_text().strip() == token
    targets = [*loom_secrets.values(), a_dir / "secret", "/work/secret", "/tmp/secret"]
    probes = "; ".join(f"cat {p} 2>/dev/null && echo LEAK {p}" for p in targets)
    staff_key = loom_secrets["key"].read_text()
    sweep = (
        "find / -path /proc -prune -o -path /sys -prune -o -type f -print 2>/dev/null"
        f" | xargs grep -l -e {token} -e {staff_key} 2>/dev/null; echo swept"
    )
    out = await _run(backend, f"{probes}; {sweep}; cat /proc/self/mountinfo", trajectory_id="b")
    assert "LEAK" not in out and token not in out and staff_key not in out
    assert "swept" in out
    mounts = out[out.index("swept") :]
    for host_path in (REPOSITORY, loom_secrets["key"].parent, a_dir):
        assert str(host_path) not in mounts
    b_dir = backend.host_workdir("b")
    assert b_dir is not None and b_dir.parent == a_dir.parent  # same root, separate binds
    assert not b_dir.is_relative_to(REPOSITORY)


async def test_proc_does_not_lead_out_of_the_container(
    backend: DockerBackend, tmp_path: Path
) -> None:
    host_only = tmp_path / "host-only"
    host_only.write_text("host")
    out = await _run(backend, "ls -d /proc/[0-9]* | wc -l; cat /proc/*/cmdline 2>/dev/null | "
                     f"tr '\\0' ' '; echo; cat /proc/1/root{host_only} 2>&1; "
                     "ls /proc/1/root/; readlink /proc/1/root")  # fmt: skip
    count, cmdlines, rest = out.split("\n", 2)
    assert int(count) < 10  # the container's own few processes, not the host's hundreds
    assert "python" not in cmdlines and "dockerd" not in cmdlines  # host processes: unseen
    assert "sleep 2147483647" in cmdlines  # pid 1 is the container's init
    assert "No such file" in rest and "host\n" not in rest
    assert "work" in rest.split() and "main" not in rest.split()


def _host_address() -> str | None:
    """The host's own address its outgoing traffic leaves from (not a Docker bridge's): what a
    service bound to 0.0.0.0 listens on. No packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("203.0.113.1", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if ipaddress.ip_address(address).is_loopback else address


@contextmanager
def _listener(host: str, port: int = 0) -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on the host recording what each connection sends."""
    server = socket.create_server((host, port))
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(2)
                received.append(connection.recv(100).strip())

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join(5)
        server.close()


async def test_network_is_off_unless_the_tool_allows_it(
    dockerd: tuple[DockerDaemon, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline, a listener on the host's own address, which the operator allows (the egress
    rules reject it otherwise: test_docker_egress.py), stands for the world."""
    address = _host_address()
    if address is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    monkeypatch.setenv(ALLOW_VARIABLE, f"{address}/32")
    daemon, image = dockerd
    backend = _make_backend(daemon, image, "net")
    interfaces = "ls /sys/class/net | tr '\\n' ' '; echo"
    probe = interfaces + "; echo {word} | nc -w 2 {host} {port} 2>/dev/null && echo ok"
    sent_words = []
    try:
        with (
            _listener("127.0.0.1") as (loopback_port, loopback_got),
            _listener(address) as (host_port, host_got),
        ):
            for network in (False, True, False):  # one container: attached, then detached again
                word = f"w-{network}-{uuid.uuid4().hex[:6]}"
                command = probe.format(word=word, host=address, port=host_port)
                out = await _run(backend, command, network=network)
                links = out.split("\n")[0].split()
                assert [n[:3] for n in links] == (["eth", "lo"] if network else ["lo"]), out
                assert ("ok" in out) is network, out
                sent_words += [word.encode()] if network else []
                command = probe.format(word=word, host="127.0.0.1", port=loopback_port)
                assert "ok" not in await _run(backend, command, network=network)
            await asyncio.sleep(0.3)
    finally:
        await backend.close()
    assert host_got == sent_words
    assert loopback_got == []  # the host's loopback is never the container's


async def test_fork_bomb_stays_within_the_pids_limit(backend: DockerBackend) -> None:
    # The timeout counts from the dispatch, and dockerd can take seconds to start an exec on a
    # loaded host: long enough that the bomb surely runs (and is seen) before it is killed.
    started = time.monotonic()
    bomb = asyncio.create_task(
        backend.run(_dispatch("bomb", "b() { b | b & }; b; sleep 30", timeout_s=10))
    )
    most = 0
    while not bomb.done():
        most = max(most, len(leftover_processes(f"{backend.node_id}/bomb:")))
        assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks
        await asyncio.sleep(0.1)
    outcome: ExecOutcome = await bomb
    # it ends by its timeout, or earlier when its own shell cannot fork any more
    assert outcome.timed_out or outcome.exit_code not in (0, None), outcome
    assert outcome.infra_error is None and time.monotonic() - started < 30
    assert 0 < most <= POLICY.pids_limit
    assert leftover_processes(f"{backend.node_id}/") == []
    assert await _run(backend, "echo alive") == "alive\n"  # the trajectory goes on


async def test_no_docker_socket_inside_and_a_container_binding_it_is_replaced(
    backend: DockerBackend, dockerd: tuple[DockerDaemon, str]
) -> None:
    daemon, image = dockerd
    # a container left by an older, looser agent: root, the daemon's socket bound in
    daemon.docker(
        "run", "-d", "--name", backend.container_name("old"),
        "--label", f"loom.node={backend.node_id}",
        "-v", f"{daemon.socket_path}:/var/run/docker.sock",
        image, "sleep", "600",
    )  # fmt: skip
    look = "id -u; find / -path /proc -prune -o -name '*.sock' -print; grep -cF docker.sock "
    out = await _run(backend, look + "/proc/self/mountinfo", trajectory_id="old")
    assert out.split() == [str(UID), "0"], out


async def test_only_the_dispatch_env_and_loom_variables_reach_an_action(
    dockerd: tuple[DockerDaemon, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    daemon, image = dockerd
    monkeypatch.setenv("LOOM_ADMIN_API_KEY", "agent-secret-1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "agent-secret-2")
    backend = _make_backend(daemon, image, "env")
    try:
        out = await _run(backend, "env", env={"TOOL_SETTING": "yes"})
    finally:
        await backend.close()
    names = {line.partition("=")[0] for line in out.splitlines()}
    assert "agent-secret" not in out
    assert {n for n in names if n.startswith("LOOM_")} == {"LOOM_ACTION", "LOOM_DOP", "LOOM_CORES"}
    assert "TOOL_SETTING" in names
    assert names <= {"TOOL_SETTING", "LOOM_ACTION", "LOOM_DOP", "LOOM_CORES", "PATH", "HOME",
                     "HOSTNAME", "PWD", "SHLVL", "_"}  # fmt: skip
