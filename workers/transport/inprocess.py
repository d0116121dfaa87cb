"""In-process transport (asyncio) for the embedded mode and fast tests.

Same semantics as the Redis Streams one (see ``base.py``): consumer groups, pending entries,
acknowledgement, reclaim after an idle time, delivery counts, trimming what every group
acknowledged. Messages are copied through their dict form on every delivery so no caller shares
mutable state with another. All callers must run on one event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from workers.transport.base import TRIM_INTERVAL_S, Delivery, PendingEntry, Transport
from workers.transport.messages import Message, decode_message


@dataclass
class _Pending:
    consumer: str
    delivered_at: float
    delivery_count: int
    position: int  # the entry's index in the stream, trimmed entries counted


@dataclass
class _Group:
    next_index: int = 0  # the next entry to deliver, trimmed entries counted
    pending: dict[str, _Pending] = field(default_factory=dict)


@dataclass
class _Stream:
    ids: list[str] = field(default_factory=list)
    entries: dict[str, dict[str, object]] = field(default_factory=dict)
    groups: dict[str, _Group] = field(default_factory=dict)
    trimmed: int = 0  # entries removed from the front of ``ids``
    changed: asyncio.Condition | None = None

    def condition(self) -> asyncio.Condition:
        if self.changed is None:
            self.changed = asyncio.Condition()
        return self.changed


class InProcessTransport(Transport):
    """A dict of streams in memory; ``read`` blocks on an asyncio.Condition."""

    def __init__(self, *, trim_interval_s: float = TRIM_INTERVAL_S) -> None:
        super().__init__(trim_interval_s=trim_interval_s)
        self._streams: dict[str, _Stream] = {}
        self._sequence = itertools.count(1)
        self._closed = False

    def _stream(self, name: str) -> _Stream:
        if self._closed:
            raise RuntimeError("transport is closed")
        stream = self._streams.get(name)
        if stream is None:
            stream = self._streams[name] = _Stream()
        return stream

    def _group(self, stream: str, group: str) -> _Group:
        entry = self._stream(stream).groups.get(group)
        if entry is None:
            raise LookupError(f"NOGROUP: no group {group!r} on stream {stream!r}")
        return entry

    def _deliver(self, stream: str, entry_id: str, count: int) -> Delivery:
        data = self._streams[stream].entries[entry_id]
        return Delivery(stream, entry_id, decode_message(dict(data)), count)

    async def ensure_group(self, stream: str, group: str) -> None:
        target = self._stream(stream)
        target.groups.setdefault(group, _Group(next_index=target.trimmed))

    async def publish(self, stream: str, message: Message) -> str:
        return (await self.publish_many(stream, [message]))[0]

    async def publish_many(self, stream: str, messages: Sequence[Message]) -> list[str]:
        target = self._stream(stream)
        ids = []
        for message in messages:
            entry_id = f"{int(time.time() * 1000)}-{next(self._sequence)}"
            target.ids.append(entry_id)
            target.entries[entry_id] = message.to_dict()
            ids.append(entry_id)
        condition = target.condition()
        async with condition:
            condition.notify_all()
        return ids

    def _take_new(self, stream: str, group: str, consumer: str, count: int) -> list[Delivery]:
        target = self._streams[stream]
        state = self._group(stream, group)
        start = state.next_index - target.trimmed
        taken = target.ids[start : start + count]
        now = time.monotonic()
        deliveries = []
        for position, entry_id in enumerate(taken, start=state.next_index):
            if entry_id not in target.entries:  # deleted meanwhile
                continue
            state.pending[entry_id] = _Pending(consumer, now, 1, position)
            deliveries.append(self._deliver(stream, entry_id, 1))
        state.next_index += len(taken)
        return deliveries

    async def read(
        self, stream: str, group: str, consumer: str, *, count: int = 64, block_ms: int = 1000
    ) -> list[Delivery]:
        target = self._stream(stream)
        deliveries = self._take_new(stream, group, consumer, count)
        if deliveries or block_ms <= 0:
            return deliveries
        condition = target.condition()
        deadline = time.monotonic() + block_ms / 1000
        async with condition:
            while True:
                deliveries = self._take_new(stream, group, consumer, count)
                remaining = deadline - time.monotonic()
                if deliveries or remaining <= 0:
                    return deliveries
                try:
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancel
                    # that lands as the wait completes, and the reader would never stop.
                    async with asyncio.timeout(remaining):
                        await condition.wait()
                except TimeoutError:
                    return self._take_new(stream, group, consumer, count)

    async def ack(self, stream: str, group: str, entry_ids: Sequence[str]) -> int:
        state = self._group(stream, group)
        acked = sum(1 for entry_id in entry_ids if state.pending.pop(entry_id, None) is not None)
        if entry_ids:
            await self._trim_after_ack(stream)
        return acked

    async def pending(self, stream: str, group: str, *, count: int = 1000) -> list[PendingEntry]:
        state = self._group(stream, group)
        now = time.monotonic()
        entries = sorted(state.pending.items(), key=lambda item: item[1].position)
        return [
            PendingEntry(entry_id, p.consumer, int((now - p.delivered_at) * 1000), p.delivery_count)
            for entry_id, p in entries[:count]
        ]

    async def reclaim(
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int, count: int = 64
    ) -> list[Delivery]:
        state = self._group(stream, group)
        target = self._streams[stream]
        now = time.monotonic()
        deliveries: list[Delivery] = []
        for entry in await self.pending(stream, group):
            if len(deliveries) >= count:
                break
            if entry.idle_ms < min_idle_ms:
                continue
            if entry.entry_id not in target.entries:  # like XAUTOCLAIM: drop deleted entries
                state.pending.pop(entry.entry_id, None)
                continue
            position = state.pending[entry.entry_id].position
            claimed = _Pending(consumer, now, entry.delivery_count + 1, position)
            state.pending[entry.entry_id] = claimed
            deliveries.append(self._deliver(stream, entry.entry_id, claimed.delivery_count))
        return deliveries

    async def touch(self, stream: str, group: str, consumer: str, entry_ids: Sequence[str]) -> None:
        state = self._group(stream, group)
        now = time.monotonic()
        for entry_id in entry_ids:
            entry = state.pending.get(entry_id)
            if entry is not None:
                entry.consumer = consumer
                entry.delivered_at = now

    async def trim(self, stream: str) -> int:
        target = self._stream(stream)
        if not target.groups:
            return 0
        safe = min(
            min((p.position for p in group.pending.values()), default=group.next_index)
            for group in target.groups.values()
        )
        count = safe - target.trimmed
        if count <= 0:
            return 0
        for entry_id in target.ids[:count]:
            target.entries.pop(entry_id, None)
        del target.ids[:count]
        target.trimmed = safe
        return count

    async def length(self, stream: str) -> int:
        return len(self._stream(stream).entries)

    async def delete(self, streams: Sequence[str]) -> None:
        for name in streams:
            self._streams.pop(name, None)

    async def close(self) -> None:
        self._closed = True
        self._streams.clear()
