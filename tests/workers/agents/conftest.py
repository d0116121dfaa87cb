"""Fixtures for the agent tests: a real Redis transport under a unique prefix, a private dockerd,
and the test-as-scheduler helpers (publish Dispatch, read ActionResult — no fake scheduler)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest

from workers.agents.common import procs
from workers.agents.cpu.sandbox import Sandbox, SandboxUnavailable
from workers.testing.dockerd import DockerDaemon, DockerUnavailable, build_busybox_image
from workers.transport import (
    SCHEDULER_GROUP,
    ActionResult,
    Dispatch,
    Message,
    RedisStreamsTransport,
    StreamNames,
    Transport,
)

REDIS_URL = "redis://127.0.0.1:6379/0"
T = TypeVar("T")


@pytest.fixture
def names() -> StreamNames:
    return StreamNames(prefix=f"looptest-{uuid.uuid4().hex[:12]}")


@asynccontextmanager
async def redis_transport_for(names: StreamNames) -> AsyncIterator[RedisStreamsTransport]:
    """A Redis transport; on exit deletes every key under ``names.prefix`` (never FLUSHALL)."""
    transport = RedisStreamsTransport(REDIS_URL)
    try:
        await transport.client.ping()
    except OSError as exc:
        await transport.close()
        pytest.skip(f"Redis at {REDIS_URL} is not reachable: {exc}")
    try:
        yield transport
    finally:
        keys = await bounded(_keys(transport, names.prefix), "scanning test keys")
        if keys:
            await bounded(transport.client.delete(*keys), "deleting test keys")
        await bounded(transport.close(), "closing the Redis transport")


async def _keys(transport: RedisStreamsTransport, prefix: str) -> list[bytes]:
    return [key async for key in transport.client.scan_iter(match=f"{prefix}:*")]


@pytest.fixture
async def redis_transport(names: StreamNames) -> AsyncIterator[RedisStreamsTransport]:
    async with redis_transport_for(names) as transport:
        yield transport


class SchedulerStandIn:
    """The test itself playing the scheduler: reads the pool's event stream as group
    ``scheduler`` and keeps everything it saw."""

    def __init__(self, transport: Transport, names: StreamNames, pool: str) -> None:
        self.transport = transport
        self.stream = names.events(pool)
        self.names = names
        self.seen: list[Message] = []

    async def start(self) -> None:
        await self.transport.ensure_group(self.stream, SCHEDULER_GROUP)

    async def send(self, node_id: str, *messages: Message) -> None:
        await self.transport.publish_many(self.names.dispatch(node_id), list(messages))

    async def _pump(self, block_ms: int) -> None:
        deliveries = await self.transport.read(
            self.stream, SCHEDULER_GROUP, "test", count=100, block_ms=block_ms
        )
        self.seen.extend(d.message for d in deliveries)
        await self.transport.ack(self.stream, SCHEDULER_GROUP, [d.entry_id for d in deliveries])

    async def wait_for(self, kind: type, count: int = 1, timeout_s: float = 20.0) -> list:
        deadline = time.monotonic() + timeout_s
        while True:
            found = [m for m in self.seen if isinstance(m, kind)]
            if len(found) >= count:
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"only {len(found)}/{count} {kind.__name__} in {timeout_s} s")
            await self._pump(100)

    async def results(self, count: int, timeout_s: float = 20.0) -> dict[str, ActionResult]:
        found = await self.wait_for(ActionResult, count, timeout_s)
        return {r.action_id: r for r in found}


async def bounded(awaitable: Awaitable[T], what: str, timeout_s: float = 20.0) -> T:
    """Await with a deadline; on expiry print every pending task's stack *before* cancelling,
    so a hang becomes a failure that shows where everything waits."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        for pending in asyncio.all_tasks():
            print(f"--- task {pending.get_name()}")
            pending.print_stack(limit=20)
        task.cancel()
        raise AssertionError(f"{what} did not finish in {timeout_s} s")
    return task.result()


def cpu_dispatch(action: str, command: str, **fields: Any) -> Dispatch:
    """A cpu Dispatch for trajectory ``t`` on the first usable core; ``fields`` override."""
    base = Dispatch(
        action_id=action,
        attempt=1,
        job_id="j",
        kind="cpu",
        command=command,
        cores=tuple(sorted(os.sched_getaffinity(0)))[:1],
        timeout_s=10.0,
        trajectory_id="t",
    )
    return dataclasses.replace(base, **fields)


def leftover_processes(marker_prefix: str) -> list[int]:
    """Live processes whose LOOM_ACTION marker starts with ``marker_prefix`` (a /proc scan)."""
    needle = f"{procs.MARKER_VARIABLE}={marker_prefix}".encode()
    found = []
    for pid in procs.PROC.iterdir():
        if not pid.name.isdigit():
            continue
        try:
            environ = (pid / "environ").read_bytes()
        except OSError:
            continue
        if any(v.startswith(needle) for v in environ.split(b"\0")) and procs.is_alive(
            int(pid.name)
        ):
            found.append(int(pid.name))
    return found


async def wait_until(
    condition: Callable[[], bool], timeout_s: float = 10.0, interval_s: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval_s)


def skip_unless_bwrap_runs(what: str) -> None:
    """Skip ``what`` (printing the reason) where bubblewrap cannot run at all."""
    try:
        sandbox = Sandbox()
        sandbox.self_test()
        sandbox.close()
    except SandboxUnavailable as exc:
        print(f"{what} skipped: {exc}")
        pytest.skip(f"bubblewrap cannot run here: {exc}")


def unique_node_id(request: pytest.FixtureRequest, prefix: str) -> str:
    """A node id of this test and process: its action markers are the test's alone."""
    return f"{prefix}-{request.node.name[:20]}-{os.getpid()}"


@pytest.fixture(scope="session")
def dockerd(starts_processes: None) -> Iterator[tuple[DockerDaemon, str]]:
    """A private real dockerd and a locally built busybox image; skips with the reason."""
    try:
        daemon = DockerDaemon.start()
    except DockerUnavailable as exc:
        print(f"docker tests skipped: {exc}")
        pytest.skip(f"dockerd cannot start here: {exc}")
    try:
        image = build_busybox_image(daemon)
        yield daemon, image
    finally:
        daemon.stop()
