"""A router in front of two in-process emulated engines, with the control plane's registry on
the real Redis under a prefix of its own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest
import redis.asyncio as aioredis

from workers.engine.app import Engine, EngineApp
from workers.engine.asgi import Server, bind
from workers.engine.core import EmulatedEngine, EngineConfig
from workers.router.app import RouterApp
from workers.router.policies import RoutingPolicy, make_policy
from workers.router.pool import WorkerPool
from workers.router.registry import Registry, RegistryNames, StatePublisher
from workers.router.server import DEFAULT_SERVER, LeanServer, make_server

FAST = 0.01  # wall seconds per modelled second
MODEL = "tiny"
KEY = "loom_test_key_of_job_7"
OTHER_KEY = "loom_test_key_of_job_8"
TEARDOWN_S = 60.0  # well inside the suite's per-test timeout, so the pending tasks get named


@dataclass
class Stack:
    engines: list[Engine]
    engine_servers: list[Server]
    pool: WorkerPool
    app: RouterApp
    router: Server | LeanServer
    registry: Registry
    publisher: StatePublisher
    names: RegistryNames

    @property
    def url(self) -> str:
        return self.router.url

    async def trajectory(self, trajectory_id: str, job: str = "7") -> str:
        await self.registry.register_trajectory(trajectory_id, job)
        return trajectory_id


async def start_stack(
    redis_url: str,
    *,
    engines: int = 2,
    policy: RoutingPolicy | None = None,
    max_batch: int = 8,
    engine_factory: Callable[[], Engine] | None = None,
    http_server: str = DEFAULT_SERVER,
) -> Stack:
    """Engines (emulated unless ``engine_factory`` makes others) behind a router on Redis."""
    make = engine_factory or (
        lambda: EmulatedEngine(EngineConfig(time_scale=FAST, max_batch=max_batch))
    )
    emulated = [make() for _ in range(engines)]
    servers = [Server(EngineApp(e, MODEL), bind()) for e in emulated]
    for server in servers:
        await server.start()
    names = RegistryNames(prefix=f"looptest-{uuid.uuid4().hex[:12]}")
    client = aioredis.Redis.from_url(redis_url)
    registry = Registry(client, names)
    await registry.start()
    await registry.register_key(KEY, "7")
    await registry.register_key(OTHER_KEY, "8")
    publisher = StatePublisher(client, names, interval_s=0.01)
    await publisher.start()
    pool = WorkerPool(
        [s.url for s in servers],
        health_interval_s=0.05,
        health_timeout_s=1.0,
        metrics_interval_s=0.05,
    )
    await pool.start()
    app = RouterApp(
        pool,
        policy or make_policy("heddle", batch_limit=max_batch),
        registry=registry,
        models=(MODEL,),
        admin_token="admin-secret",
        publish=publisher.publish,
    )
    router = make_server(app, bind(), http_server)
    await router.start()
    return Stack(emulated, servers, pool, app, router, registry, publisher, names)


async def stop_stack(stack: Stack) -> None:
    """Stop everything; a teardown that has not ended after ``TEARDOWN_S`` fails naming every
    task still pending and the chain of awaits it is stuck in (how the stall of a task that lost
    its cancellation was found: ``workers.cancelling``)."""
    teardown = asyncio.ensure_future(_stop_stack(stack))
    done, _ = await asyncio.wait({teardown}, timeout=TEARDOWN_S)
    if not done:
        current = asyncio.current_task()
        pending = "\n".join(_awaits(task) for task in asyncio.all_tasks() if task is not current)
        teardown.cancel()
        raise AssertionError(f"router stack teardown stalled; pending tasks:\n{pending}")
    teardown.result()


def _awaits(task: asyncio.Future[object]) -> str:
    """``task``'s name and where each coroutine of its await chain is suspended."""
    lines = [task.get_name() if isinstance(task, asyncio.Task) else repr(task)]
    awaited: object = task.get_coro() if isinstance(task, asyncio.Task) else None
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            lines.append(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return "\n".join(lines)


async def _stop_stack(stack: Stack) -> None:
    await stack.router.stop()
    await stack.pool.close()
    await stack.publisher.close()
    await stack.registry.close()
    for server in stack.engine_servers:
        await server.stop()
    for engine in stack.engines:
        await engine.stop()
    client = stack.registry.client
    keys = [key async for key in client.scan_iter(match=f"{stack.names.prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def stack(redis_url: str) -> AsyncIterator[Stack]:
    started = await start_stack(redis_url)
    yield started
    await stop_stack(started)
