"""One transport fixture parametrised over both implementations (the contract suite)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from workers.transport import InProcessTransport, RedisStreamsTransport, StreamNames, Transport

REDIS_URL = "redis://127.0.0.1:6379/0"
# Acks never trim on their own here: trimming tests call ``trim`` or lower the interval.
NO_TRIM_ON_ACK_S = 3600.0


@pytest.fixture
def names() -> StreamNames:
    """A unique key prefix per test: tests never touch keys they did not create."""
    return StreamNames(prefix=f"looptest-{uuid.uuid4().hex[:12]}")


@pytest.fixture(params=["inprocess", "redis"])
async def transport(request: pytest.FixtureRequest, names: StreamNames) -> AsyncIterator[Transport]:
    if request.param == "inprocess":
        memory = InProcessTransport(trim_interval_s=NO_TRIM_ON_ACK_S)
        yield memory
        await memory.close()
        return
    redis_transport = RedisStreamsTransport(REDIS_URL, trim_interval_s=NO_TRIM_ON_ACK_S)
    try:
        await redis_transport.client.ping()
    except OSError as exc:
        await redis_transport.close()
        pytest.skip(f"Redis at {REDIS_URL} is not reachable: {exc}")
    yield redis_transport
    keys = [key async for key in redis_transport.client.scan_iter(match=f"{names.prefix}:*")]
    if keys:
        await redis_transport.client.delete(*keys)
    await redis_transport.close()
