"""Redis-only behaviour: malformed entries are acknowledged and skipped; trimming across
connections and under a steady flow."""

from __future__ import annotations

import asyncio

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


async def test_stream_stays_bounded_under_steady_flow(redis_url: str, names: StreamNames) -> None:
    """Publish → read → ack, as the scheduler and the agents do: acks trim the stream every
    interval, so its length follows what is unacknowledged, not what was ever published."""
    transport = RedisStreamsTransport(redis_url, trim_interval_s=0.05)
    stream = names.dispatch("n")
    rounds, batch = 100, 50
    try:
        await transport.ensure_group(stream, "agents")
        longest = 0
        for round_index in range(rounds):
            await transport.publish_many(stream, [_dispatch(round_index, i) for i in range(batch)])
            deliveries = await transport.read(stream, "agents", "c", count=batch, block_ms=100)
            await transport.ack(stream, "agents", [d.entry_id for d in deliveries])
            longest = max(longest, await transport.length(stream))
            await asyncio.sleep(0.01)
        assert longest <= rounds * batch // 5
        await transport.trim(stream)
        assert await transport.length(stream) == 0
    finally:
        await transport.delete([stream])
        await transport.close()


async def test_restarted_process_rereads_pending_entries_after_trim(
    redis_url: str, names: StreamNames
) -> None:
    """A consumer killed with entries pending: a new connection (the restarted process) still
    reclaims them after another process's acks trimmed the stream."""
    stream = names.dispatch("n")
    crashed = RedisStreamsTransport(redis_url)
    survivor = RedisStreamsTransport(redis_url, trim_interval_s=0)
    restarted = RedisStreamsTransport(redis_url)
    try:
        await crashed.ensure_group(stream, "agents")
        ids = await crashed.publish_many(stream, [_dispatch(0, i) for i in range(4)])
        await crashed.read(stream, "agents", "n:dead", count=2, block_ms=100)
        await crashed.close()  # never acknowledges
        taken = await survivor.read(stream, "agents", "n:live", count=2, block_ms=100)
        await survivor.ack(stream, "agents", [d.entry_id for d in taken])  # trims
        assert await survivor.length(stream) == 4  # the dead consumer's entries come first
        reread = await restarted.reclaim(stream, "agents", "n:new", min_idle_ms=0)
        assert [d.entry_id for d in reread] == ids[:2]
        await restarted.ack(stream, "agents", ids[:2])
        assert await restarted.trim(stream) == 4
    finally:
        await survivor.delete([stream])
        await survivor.close()
        await restarted.close()


def _dispatch(round_index: int, index: int) -> Dispatch:
    return Dispatch(
        action_id=f"a{round_index}-{index}", attempt=1, job_id="j", kind="cpu", command="true"
    )
