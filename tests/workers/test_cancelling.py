"""Background tasks that lose a cancellation still stop: the pollers, the registry's
subscription, the state publisher, the lean server's requests (``workers.cancelling``)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable

import pytest
import redis.asyncio as aioredis

from workers.cancelling import cancel_all_and_wait, cancel_and_wait
from workers.engine.asgi import App, Receive, Scope, Send, Server, bind
from workers.router.polling import VersionPoller
from workers.router.registry import Registry, RegistryNames, StatePublisher
from workers.router.server import LeanServer

BOUND_S = 5.0  # a stop still running after this never ends


async def ends(stop: Awaitable[None], what: str) -> None:
    """``stop`` ends within the bound; if not, the test fails (after ending every task left, so
    that the loop can close)."""
    task = asyncio.ensure_future(stop)
    done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    if not done:
        await cancel_all_and_wait(asyncio.all_tasks() - {asyncio.current_task()})
        raise AssertionError(f"{what} never ended")
    task.result()


async def loses_one_cancel(ended: list[str]) -> None:
    """Carries on after its first cancellation, as a task does whose cancel landed in Python
    3.11's ``wait_for`` in the loop turn its inner awaitable completed."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(3600)
    try:
        await asyncio.sleep(3600)
    finally:
        ended.append("ended")


async def test_a_task_that_loses_its_first_cancellation_is_cancelled_again() -> None:
    ended: list[str] = []
    task = asyncio.ensure_future(loses_one_cancel(ended))
    await asyncio.sleep(0)
    await ends(cancel_and_wait(task), "the task")
    assert task.cancelled() and ended == ["ended"]


async def test_all_tasks_end_and_a_failure_is_raised_by_cancel_and_wait() -> None:
    ended: list[str] = []
    tasks = [asyncio.ensure_future(loses_one_cancel(ended)) for _ in range(3)]
    tasks.append(asyncio.ensure_future(asyncio.sleep(3600)))
    await asyncio.sleep(0)
    await ends(cancel_all_and_wait(tasks), "the tasks")
    assert all(task.cancelled() for task in tasks) and ended == ["ended"] * 3

    async def fails() -> None:
        raise RuntimeError("broken")

    failed = asyncio.ensure_future(fails())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="broken"):
        await cancel_and_wait(failed)
    await cancel_and_wait(None)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for no longer loses a cancel")
async def test_python_311_wait_for_loses_a_cancel_landing_as_its_awaitable_completes() -> None:
    """The mechanism itself: without it, a single ``cancel()`` would do."""
    inner: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    resumed: list[str] = []

    async def waits() -> None:
        resumed.append(await asyncio.wait_for(inner, 60))
        await asyncio.sleep(3600)

    task = asyncio.ensure_future(waits())
    await asyncio.sleep(0)
    inner.set_result("sent")
    task.cancel()  # the same loop turn
    await asyncio.sleep(0.05)
    assert resumed == ["sent"] and not task.done()  # the cancellation is gone
    await ends(cancel_and_wait(task), "the task")
    assert task.cancelled()


class Polls(VersionPoller):
    """A poller reading Redis back to back: a stop lands inside a command most of the time."""

    interval_s = 0.0

    def __init__(self, client: aioredis.Redis, key: str) -> None:
        self.client = client
        self.key = key

    async def refresh(self) -> bool:
        await self.client.get(self.key)
        return False


@pytest.mark.redis
async def test_redis_pollers_and_publishers_stop_wherever_the_stop_lands(redis_url: str) -> None:
    """redis-py sends every command under ``wait_for`` (its default socket timeout): stopped
    once per loop-turn offset, a poller, the registry's subscription and the state publisher
    each end within the bound (with a single cancel, the publisher's close never returned)."""
    client = aioredis.Redis.from_url(redis_url)
    names = RegistryNames(prefix=f"looptest-{uuid.uuid4().hex[:12]}")
    try:
        for turns in range(12):
            poller = Polls(client, f"{names.prefix}:probe")
            registry = Registry(client, names)
            publisher = StatePublisher(client, names, interval_s=0.0, batch=1)
            await poller.start()
            await registry.start()
            await publisher.start()
            for _ in range(turns):
                publisher.publish({"turn": turns})
                await asyncio.sleep(0)
            await ends(poller.stop(), f"the poller stopped after {turns} turns")
            await ends(registry.close(), f"the registry closed after {turns} turns")
            await ends(publisher.close(), f"the publisher closed after {turns} turns")
    finally:
        keys = [key async for key in client.scan_iter(match=f"{names.prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@contextlib.asynccontextmanager
async def request_in_progress(
    server: LeanServer | Server, tasks: set[asyncio.Task[None]]
) -> AsyncIterator[list[asyncio.Task[None]]]:
    """Starts ``server`` and sends it one request; yields the request's task (found in
    ``tasks``) once it runs, and ends it after a failed test, so that the loop can close."""
    await server.start()
    _, writer = await asyncio.open_connection("127.0.0.1", server.port)
    running: list[asyncio.Task[None]] = []
    try:
        writer.write(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        for _ in range(1000):
            if tasks:
                break
            await asyncio.sleep(0.005)
        running += tasks
        assert running
        yield running
    finally:
        writer.close()
        await cancel_all_and_wait(running)


def app_losing_one_cancel(ended: list[str]) -> App:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await loses_one_cancel(ended)

    return app


async def test_the_lean_server_stops_a_request_that_loses_its_cancellation() -> None:
    ended: list[str] = []
    server = LeanServer(app_losing_one_cancel(ended), bind())
    async with request_in_progress(server, server.tasks) as running:
        await ends(server.stop(), "the lean server's stop")
        assert ended == ["ended"] and all(task.done() for task in running)


async def test_a_uvicorn_server_ends_the_requests_its_forced_exit_leaves_running() -> None:
    """uvicorn's forced exit does not wait for its requests: its stop cancels them until they
    end (before, one that lost its cancellation outlived the stop, and the loop's close)."""
    ended: list[str] = []
    server = Server(app_losing_one_cancel(ended), bind())
    tasks = server._server.server_state.tasks
    async with request_in_progress(server, tasks) as running:
        await ends(server.stop(), "the uvicorn server's stop")
        assert ended == ["ended"] and all(task.done() for task in running)
