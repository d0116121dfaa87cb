"""Redis-only behaviour: malformed entries are acknowledged and skipped, trimming."""

from __future__ import annotations

import pytest

from workers.transport import Dispatch, RedisStreamsTransport, StreamNames, Transport

pytestmark = pytest.mark.redis


async def test_malformed_entries_are_acked_and_skipped(
    transport: Transport, names: StreamNames
) -> None:
    if not isinstance(transport, RedisStreamsTransport):
        pytest.skip("Redis-specific: the in-process transport cannot hold a malformed entry")
    stream = names.dispatch("n")
    await transport.ensure_group(stream, "agents")
    await transport.client.xadd(stream, {"m": b"{not json"})
    await transport.client.xadd(stream, {"other": b"x"})
    good = Dispatch(action_id="a", attempt=1, job_id="j", kind="cpu", command="true")
    await transport.publish(stream, good)
    deliveries = await transport.read(stream, "agents", "c", block_ms=100)
    assert [d.message for d in deliveries] == [good]
    assert [p.entry_id for p in await transport.pending(stream, "agents")] == [
        deliveries[0].entry_id
    ]


async def test_max_len_trims(names: StreamNames) -> None:
    transport = RedisStreamsTransport(max_len=10)
    stream = names.events("p")
    try:
        messages = [
            Dispatch(action_id=f"a{i}", attempt=1, job_id="j", kind="cpu", command="true")
            for i in range(500)
        ]
        await transport.publish_many(stream, messages)
        assert await transport.length(stream) < 500
    finally:
        await transport.delete([stream])
        await transport.close()
