"""Contract suite: both transports must behave the same (DESIGN.md "Processes")."""

from __future__ import annotations

import asyncio
import time

from workers.transport import (
    ActionResult,
    ApiRequestSpec,
    Cancel,
    Dispatch,
    Heartbeat,
    Message,
    NodeRegister,
    StreamNames,
    TrajectoryEnd,
    Transport,
)

GROUP = "agents"


def _dispatch(index: int) -> Dispatch:
    return Dispatch(
        action_id=f"a{index}", attempt=1, job_id="j", kind="cpu", command=f"echo {index}"
    )


async def test_every_message_type_round_trips(transport: Transport, names: StreamNames) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    messages: list[Message] = [
        Dispatch(
            action_id="a",
            attempt=2,
            job_id="j",
            kind="api",
            api=ApiRequestSpec("post", "http://x/y", {"k": "v"}, {"q": [1]}, 2.5),
            env={"A": "1"},
        ),
        Cancel(action_id="a", attempt=None),
        TrajectoryEnd(trajectory_id="t"),
        ActionResult(action_id="a", attempt=1, node_id="n", status="failed", reason="oom"),
        NodeRegister(
            node_id="n",
            pool="p",
            agent_id="n:1",
            kind="cpu",
            backend="local",
            cores=(0, 1),
            numa={0: (0, 1)},
            memory_mb=1024,
        ),
        Heartbeat(node_id="n", pool="p", agent_id="n:1", sent_at=1.5, running=("a:1",)),
    ]
    ids = await transport.publish_many(stream, messages)
    assert len(ids) == len(messages) == len(set(ids))
    deliveries = await transport.read(stream, GROUP, "c1", count=100, block_ms=100)
    assert [d.message for d in deliveries] == messages
    assert [d.entry_id for d in deliveries] == ids
    assert all(d.delivery_count == 1 for d in deliveries)


async def test_group_splits_entries_between_consumers(
    transport: Transport, names: StreamNames
) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    await transport.publish_many(stream, [_dispatch(i) for i in range(6)])
    first = await transport.read(stream, GROUP, "c1", count=4, block_ms=100)
    second = await transport.read(stream, GROUP, "c2", count=4, block_ms=100)
    assert len(first) == 4  # COUNT bounds a batch
    assert len(second) == 2
    seen = [d.message.action_id for d in first + second]  # type: ignore[union-attr]
    assert sorted(seen) == sorted(f"a{i}" for i in range(6))
    assert await transport.read(stream, GROUP, "c1", count=4, block_ms=50) == []


async def test_group_created_late_sees_earlier_entries(
    transport: Transport, names: StreamNames
) -> None:
    stream = names.events("p")
    await transport.ensure_group(stream, "first")
    await transport.publish(stream, _dispatch(1))
    await transport.ensure_group(stream, "late")
    await transport.ensure_group(stream, "late")  # idempotent
    assert len(await transport.read(stream, "late", "c", block_ms=100)) == 1
    assert len(await transport.read(stream, "first", "c", block_ms=100)) == 1


async def test_entries_stay_pending_until_acked(transport: Transport, names: StreamNames) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    await transport.publish_many(stream, [_dispatch(i) for i in range(3)])
    deliveries = await transport.read(stream, GROUP, "c1", block_ms=100)
    pending = await transport.pending(stream, GROUP)
    assert [p.entry_id for p in pending] == [d.entry_id for d in deliveries]
    assert {p.consumer for p in pending} == {"c1"}
    acked = await transport.ack(stream, GROUP, [d.entry_id for d in deliveries[:2]])
    assert acked == 2
    assert [p.entry_id for p in await transport.pending(stream, GROUP)] == [deliveries[2].entry_id]
    assert await transport.ack(stream, GROUP, [deliveries[0].entry_id]) == 0  # already acked
    assert await transport.length(stream) == 3


async def test_reclaim_only_after_idle_time(transport: Transport, names: StreamNames) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    await transport.publish(stream, _dispatch(1))
    [delivery] = await transport.read(stream, GROUP, "dead", block_ms=100)
    assert await transport.reclaim(stream, GROUP, "alive", min_idle_ms=5_000) == []
    await asyncio.sleep(0.12)
    [reclaimed] = await transport.reclaim(stream, GROUP, "alive", min_idle_ms=100)
    assert reclaimed.entry_id == delivery.entry_id
    assert reclaimed.message == delivery.message
    assert reclaimed.delivery_count == 2
    [pending] = await transport.pending(stream, GROUP)
    assert pending.consumer == "alive"
    assert pending.delivery_count == 2


async def test_touch_keeps_live_work_from_being_reclaimed(
    transport: Transport, names: StreamNames
) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    await transport.publish(stream, _dispatch(1))
    [delivery] = await transport.read(stream, GROUP, "busy", block_ms=100)
    await asyncio.sleep(0.12)
    await transport.touch(stream, GROUP, "busy", [delivery.entry_id])
    assert await transport.reclaim(stream, GROUP, "other", min_idle_ms=100) == []
    [pending] = await transport.pending(stream, GROUP)
    assert pending.consumer == "busy"
    assert pending.idle_ms < 100


async def test_read_blocks_until_a_publish(transport: Transport, names: StreamNames) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    started = time.monotonic()
    assert await transport.read(stream, GROUP, "c", block_ms=80) == []
    assert time.monotonic() - started >= 0.07

    async def publish_later() -> None:
        await asyncio.sleep(0.05)
        await transport.publish(stream, _dispatch(7))

    publisher = asyncio.create_task(publish_later())
    deliveries = await transport.read(stream, GROUP, "c", block_ms=5_000)
    await publisher
    assert [d.message.action_id for d in deliveries] == ["a7"]  # type: ignore[union-attr]


async def test_delete_removes_streams(transport: Transport, names: StreamNames) -> None:
    stream = names.events("p")
    await transport.ensure_group(stream, "scheduler")
    await transport.publish(stream, _dispatch(1))
    await transport.delete([stream])
    assert await transport.length(stream) == 0


async def test_publish_and_ack_answers_dispatches(transport: Transport, names: StreamNames) -> None:
    dispatches, events = names.dispatch("n1"), names.events("p")
    await transport.ensure_group(dispatches, GROUP)
    await transport.ensure_group(events, "scheduler")
    await transport.publish_many(dispatches, [_dispatch(i) for i in range(3)])
    deliveries = await transport.read(dispatches, GROUP, "agent", block_ms=100)
    results = [
        ActionResult(action_id=f"a{i}", attempt=1, node_id="n1", status="succeeded")
        for i in range(3)
    ]
    await transport.publish_and_ack(
        events, results, dispatches, GROUP, [d.entry_id for d in deliveries]
    )
    assert await transport.pending(dispatches, GROUP) == []
    got = await transport.read(events, "scheduler", "s", block_ms=100)
    assert [d.message for d in got] == results


# --- trimming: only what every group acknowledged goes ------------------------------------------


async def test_trim_keeps_pending_and_undelivered_entries(
    transport: Transport, names: StreamNames
) -> None:
    stream = names.dispatch("n1")
    await transport.ensure_group(stream, GROUP)
    await transport.ensure_group(stream, "observer")
    ids = await transport.publish_many(stream, [_dispatch(i) for i in range(6)])
    await transport.read(stream, GROUP, "c1", count=4, block_ms=100)
    await transport.ack(stream, GROUP, [ids[0], ids[1], ids[3]])
    observed = await transport.read(stream, "observer", "o", count=10, block_ms=100)
    await transport.ack(stream, "observer", [d.entry_id for d in observed])

    assert await transport.trim(stream) == 2  # up to GROUP's oldest pending entry
    assert await transport.length(stream) == 4
    assert [p.entry_id for p in await transport.pending(stream, GROUP)] == [ids[2]]
    assert await transport.trim(stream) == 0

    await transport.ack(stream, GROUP, [ids[2]])
    assert await transport.trim(stream) == 2  # up to GROUP's undelivered tail
    tail = await transport.read(stream, GROUP, "c1", block_ms=100)
    assert [d.entry_id for d in tail] == ids[4:]
    assert [d.message for d in tail] == [_dispatch(4), _dispatch(5)]
    await transport.ack(stream, GROUP, ids[4:])
    assert await transport.trim(stream) == 2
    assert await transport.length(stream) == 0


async def test_trim_waits_for_the_slowest_group(transport: Transport, names: StreamNames) -> None:
    stream = names.events("p")
    await transport.ensure_group(stream, "fast")
    await transport.ensure_group(stream, "slow")
    await transport.publish_many(stream, [_dispatch(i) for i in range(3)])
    deliveries = await transport.read(stream, "fast", "c", block_ms=100)
    await transport.ack(stream, "fast", [d.entry_id for d in deliveries])
    assert await transport.trim(stream) == 0
    assert len(await transport.read(stream, "slow", "c", block_ms=100)) == 3


async def test_stream_without_a_group_is_not_trimmed(
    transport: Transport, names: StreamNames
) -> None:
    stream = names.events("p")
    await transport.publish_many(stream, [_dispatch(i) for i in range(3)])
    assert await transport.trim(stream) == 0
    await transport.ensure_group(stream, "scheduler")
    assert len(await transport.read(stream, "scheduler", "s", block_ms=100)) == 3


async def test_group_created_after_a_trim_sees_what_is_left(
    transport: Transport, names: StreamNames
) -> None:
    stream = names.events("p")
    await transport.ensure_group(stream, "first")
    ids = await transport.publish_many(stream, [_dispatch(i) for i in range(5)])
    await transport.read(stream, "first", "c", count=3, block_ms=100)
    await transport.ack(stream, "first", ids[:3])
    assert await transport.trim(stream) == 3
    await transport.ensure_group(stream, "late")
    late = await transport.read(stream, "late", "c", block_ms=100)
    assert [d.entry_id for d in late] == ids[3:]
    assert [d.entry_id for d in await transport.read(stream, "first", "c", block_ms=100)] == ids[3:]


async def test_restarted_consumer_rereads_its_pending_entries_after_a_trim(
    transport: Transport, names: StreamNames
) -> None:
    """A scheduler's rebuild (reclaim with no idle time) after a crash that left acknowledged
    entries on both sides of its pending ones, and some it never read."""
    stream = names.events("p")
    await transport.ensure_group(stream, "scheduler")
    ids = await transport.publish_many(stream, [_dispatch(i) for i in range(5)])
    await transport.read(stream, "scheduler", "scheduler:dead", block_ms=100)
    await transport.ack(stream, "scheduler", [ids[0], ids[2]])
    later = await transport.publish_many(stream, [_dispatch(i) for i in range(5, 7)])
    assert await transport.trim(stream) == 1

    reread = await transport.reclaim(stream, "scheduler", "scheduler:new", min_idle_ms=0)
    assert [d.entry_id for d in reread] == [ids[1], ids[3], ids[4]]
    assert [d.message for d in reread] == [_dispatch(1), _dispatch(3), _dispatch(4)]
    assert all(d.delivery_count == 2 for d in reread)
    fresh = await transport.read(stream, "scheduler", "scheduler:new", block_ms=100)
    assert [d.entry_id for d in fresh] == later


async def test_acks_trim_at_most_once_per_interval(
    transport: Transport, names: StreamNames
) -> None:
    dispatches, events = names.dispatch("n1"), names.events("p")
    await transport.ensure_group(dispatches, GROUP)
    await transport.ensure_group(events, "scheduler")
    transport.trim_interval_s = 0
    await transport.publish_many(dispatches, [_dispatch(i) for i in range(3)])
    deliveries = await transport.read(dispatches, GROUP, "agent", block_ms=100)
    await transport.ack(dispatches, GROUP, [d.entry_id for d in deliveries[:2]])
    assert await transport.length(dispatches) == 1
    result = ActionResult(action_id="a2", attempt=1, node_id="n1", status="succeeded")
    await transport.publish_and_ack(events, [result], dispatches, GROUP, [deliveries[2].entry_id])
    assert await transport.length(dispatches) == 0

    transport.trim_interval_s = 3600  # trimmed just now: the next acks leave the stream alone
    await transport.publish(dispatches, _dispatch(3))
    deliveries = await transport.read(dispatches, GROUP, "agent", block_ms=100)
    await transport.ack(dispatches, GROUP, [d.entry_id for d in deliveries])
    assert await transport.length(dispatches) == 1
