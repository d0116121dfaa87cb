"""The embedded runtime (``make demo``'s process tree) builds its local agent on a sandbox and
refuses to start without one unless LOOM_INSECURE_UNSANDBOXED_ACTIONS is set."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest

from apps.actions.models import Action
from apps.actions.notify import get_notifier
from apps.actions.services import ActionSpec, action_submit
from apps.core.demand import parse_demand
from apps.embedded.runtime import EmbeddedRuntime
from apps.resources.apis import ToolSerializer
from apps.resources.models import PoolKind, Tool
from tests.factories import JobFactory, PoolFactory, ToolFactory
from workers.agents.cpu.agent import CpuAgent
from workers.agents.cpu.local import LocalBackend
from workers.agents.cpu.sandbox import DEFAULT_PATH, SandboxUnavailable
from workers.agents.cpu.sandbox_egress import ALLOW_VARIABLE

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(60),
    pytest.mark.processes,
]


def _local_backends(runtime: EmbeddedRuntime) -> list[LocalBackend]:
    return [
        agent.backend
        for agent in runtime.agents
        if isinstance(agent, CpuAgent) and isinstance(agent.backend, LocalBackend)
    ]


async def test_refuses_without_a_sandbox_unless_the_insecure_setting_is_on(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await asyncio.to_thread(PoolFactory.create, name="cpu", kind=PoolKind.CPU)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no bwrap to be found
    settings.LOOM_INSECURE_UNSANDBOXED_ACTIONS = False
    refused = EmbeddedRuntime(work_root=tmp_path / "a", cores=[0])
    try:
        with pytest.raises(SandboxUnavailable, match="install bubblewrap"):
            await refused.start()
    finally:
        await refused.stop()

    settings.LOOM_INSECURE_UNSANDBOXED_ACTIONS = True
    insecure = EmbeddedRuntime(work_root=tmp_path / "b", cores=[0])
    await insecure.start()
    try:
        [backend] = _local_backends(insecure)
        assert not backend.sandboxed
    finally:
        await insecure.stop()


async def test_sandboxed_with_the_interpreter_bound_and_work_root_private(
    tmp_path: Path, settings: Any
) -> None:
    await asyncio.to_thread(PoolFactory.create, name="cpu", kind=PoolKind.CPU)
    runtime = EmbeddedRuntime(work_root=tmp_path / "w", cores=[0])
    await runtime.start()
    try:
        [backend] = _local_backends(runtime)
        assert backend.sandbox is not None
        assert backend.sandbox.ro_binds  # this interpreter, for tools that run its Python
        repository = Path(settings.BASE_DIR).resolve()
        assert all(not repository.is_relative_to(b.resolve()) for b in backend.sandbox.ro_binds)
        if os.geteuid() == 0:
            assert (tmp_path / "w").stat().st_mode & 0o777 == 0o711
    finally:
        await runtime.stop()


async def test_tool_network_travels_from_the_tool_row_to_the_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tool.network (REST-exposed) → the store's record → Dispatch.network → the sandbox: the
    same command reaches a listener on the host's own address (allowed by the operator, as an
    internal service would be) only through the tool that has it, and the host's loopback (the
    database's, Redis's) through neither."""
    if shutil.which("slirp4netns", path=DEFAULT_PATH) is None:
        pytest.skip("no slirp4netns here: network-on actions fail (apt-get install slirp4netns)")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        try:
            udp.connect(("203.0.113.1", 9))  # sends nothing: picks the outward address
        except OSError:
            pytest.skip("this host has no route outwards")
        address = udp.getsockname()[0]
    if address.startswith("127."):
        pytest.skip("this host has no non-loopback IPv4 address")
    monkeypatch.setenv(ALLOW_VARIABLE, address)

    async def greet(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"hello-from-the-host\n")
        await writer.drain()
        writer.close()

    servers = [await asyncio.start_server(greet, host, 0) for host in (address, "127.0.0.1")]
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    connect = (
        'python3 -c "import socket, sys\nfor host, port in zip(sys.argv[1::2], sys.argv[2::2]):'
        "\n try: print(socket.create_connection((host, int(port)), 3).recv(64).decode().strip())"
        f"\n except OSError: print('unreachable')\" {address} {ports[0]} 127.0.0.1 {ports[1]}"
    )

    def set_up() -> tuple[Any, dict[str, Any]]:
        pool = PoolFactory.create(name="cpu", kind=PoolKind.CPU)
        online = ToolFactory.create(name="online", pool=pool, network=True, command_template="")
        ToolFactory.create(name="offline", pool=pool, command_template="")
        return JobFactory.create(), ToolSerializer(online).data

    job, serialized = await asyncio.to_thread(set_up)
    assert serialized["network"] is True
    runtime = EmbeddedRuntime(work_root=tmp_path / "w", cores=[0])
    await runtime.start()
    try:
        online, offline = await asyncio.gather(
            asyncio.to_thread(_submit_and_wait, job, "online", connect),
            asyncio.to_thread(_submit_and_wait, job, "offline", connect),
        )
    finally:
        await runtime.stop()
        for server in servers:
            server.close()
            await server.wait_closed()
    assert online.status == "succeeded", online.output
    assert online.output.split() == ["hello-from-the-host", "unreachable"], online.output
    assert offline.output.split() == ["unreachable", "unreachable"], offline.output


def _submit_and_wait(job: Any, tool_name: str, command: str) -> Action:
    tool = Tool.objects.get(name=tool_name)
    spec = ActionSpec(
        demand=parse_demand({"cpu": 1}, None),
        tool_id=tool.pk,
        pool_id=tool.pool_id,
        command=command,
        timeout_s=30.0,
    )
    action = action_submit(job=job, spec=spec).action
    with get_notifier().subscribe(action.pk) as subscription:
        for _ in range(60):
            action.refresh_from_db()
            if action.is_terminal:
                break
            subscription.wait(1.0)
    return action
