"""Redis Streams transport: XADD, XREADGROUP (COUNT, BLOCK), XACK, XAUTOCLAIM, XCLAIM JUSTID.

One stream entry = one message, stored as a single field ``m`` holding the message's compact JSON
(``messages.encode_json``). Batches go through a non-transactional pipeline (one round trip).
A malformed entry is acknowledged and logged, never retried forever. Trimming is one Lua script
(XINFO GROUPS, XPENDING, XTRIM MINID), so no group can move between reading the safe point and
trimming up to it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from workers.transport.base import TRIM_INTERVAL_S, Delivery, PendingEntry, Transport
from workers.transport.messages import Message, MessageError, decode_json, encode_json

logger = logging.getLogger(__name__)

_FIELD = "m"

# Entries before the oldest one some group still needs: per group its oldest pending entry, or
# (none pending) the one after its last delivered. Exact MINID, never past that point; a stream
# without a group is left whole.
_TRIM_SCRIPT = """
local stream = KEYS[1]
if redis.call('EXISTS', stream) == 0 then return 0 end
local safe_id, safe_ms, safe_seq
for _, fields in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
  local group = {}
  for i = 1, #fields, 2 do group[fields[i]] = fields[i + 1] end
  local id = group['last-delivered-id']
  if group['pending'] > 0 then id = redis.call('XPENDING', stream, group['name'])[2] end
  local ms_text, seq_text = string.match(id, '^(%d+)-(%d+)$')
  local ms, seq = tonumber(ms_text), tonumber(seq_text)
  if group['pending'] == 0 and seq < 2 ^ 53 then
    seq = seq + 1
    id = ms_text .. '-' .. string.format('%d', seq)
  end
  if safe_id == nil or ms < safe_ms or (ms == safe_ms and seq < safe_seq) then
    safe_id, safe_ms, safe_seq = id, ms, seq
  end
end
if safe_id == nil then return 0 end
return redis.call('XTRIM', stream, 'MINID', safe_id)
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisStreamsTransport(Transport):
    """At-least-once streams over one Redis (``redis_url`` like ``redis://127.0.0.1:6379/0``)."""

    def __init__(
        self,
        redis_url: str = "redis://127.0.0.1:6379/0",
        *,
        trim_interval_s: float = TRIM_INTERVAL_S,
    ) -> None:
        super().__init__(trim_interval_s=trim_interval_s)
        self._redis: aioredis.Redis = aioredis.Redis.from_url(redis_url, decode_responses=False)
        self._trim_script = self._redis.register_script(_TRIM_SCRIPT)

    @property
    def client(self) -> aioredis.Redis:
        return self._redis

    async def ensure_group(self, stream: str, group: str) -> None:
        try:
            await self._redis.xgroup_create(stream, group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def publish(self, stream: str, message: Message) -> str:
        entry_id = await self._redis.xadd(stream, {_FIELD: encode_json(message)})
        return _text(entry_id)

    async def publish_many(self, stream: str, messages: Sequence[Message]) -> list[str]:
        if not messages:
            return []
        if len(messages) == 1:  # a lone dispatch: a pipeline's bookkeeping would be all cost
            return [await self.publish(stream, messages[0])]
        async with self._redis.pipeline(transaction=False) as pipe:
            for message in messages:
                pipe.xadd(stream, {_FIELD: encode_json(message)})
            ids = await pipe.execute()
        return [_text(entry_id) for entry_id in ids]

    async def publish_and_ack(
        self,
        stream: str,
        messages: Sequence[Message],
        ack_stream: str,
        group: str,
        entry_ids: Sequence[str],
    ) -> None:
        async with self._redis.pipeline(transaction=True) as pipe:
            for message in messages:
                pipe.xadd(stream, {_FIELD: encode_json(message)})
            if entry_ids:
                pipe.xack(ack_stream, group, *entry_ids)
            await pipe.execute()
        if entry_ids:
            await self._trim_after_ack(ack_stream)

    async def _decode(
        self, stream: str, group: str, raw_entries: Sequence[Any], counts: dict[str, int]
    ) -> list[Delivery]:
        deliveries: list[Delivery] = []
        poison: list[str] = []
        for raw_id, fields in raw_entries:
            entry_id = _text(raw_id)
            if fields is None:  # entry deleted while pending
                poison.append(entry_id)
                continue
            try:
                message = decode_json(fields[_FIELD.encode()])
            except (KeyError, MessageError) as exc:
                logger.error("dropping malformed entry %s on %s: %s", entry_id, stream, exc)
                poison.append(entry_id)
                continue
            deliveries.append(Delivery(stream, entry_id, message, counts.get(entry_id, 1)))
        if poison:
            await self.ack(stream, group, poison)
        return deliveries

    async def read(
        self, stream: str, group: str, consumer: str, *, count: int = 64, block_ms: int = 1000
    ) -> list[Delivery]:
        try:
            response: Any = await self._redis.xreadgroup(
                group,
                consumer,
                {stream: ">"},
                count=count,
                block=block_ms if block_ms > 0 else None,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # Redis came back empty (no persistence): the group went with the stream. Create it
            # again from the stream's start, so what was published since is read, not skipped.
            logger.warning("group %s of %s is gone (Redis restarted?); creating it", group, stream)
            await self.ensure_group(stream, group)
            return []
        if not response:
            return []
        _, raw_entries = response[0]
        return await self._decode(stream, group, raw_entries, {})

    async def ack(self, stream: str, group: str, entry_ids: Sequence[str]) -> int:
        if not entry_ids:
            return 0
        acked = int(await self._redis.xack(stream, group, *entry_ids))
        await self._trim_after_ack(stream)
        return acked

    async def pending(self, stream: str, group: str, *, count: int = 1000) -> list[PendingEntry]:
        rows = await self._redis.xpending_range(stream, group, min="-", max="+", count=count)
        return [
            PendingEntry(
                entry_id=_text(row["message_id"]),  # type: ignore[arg-type]
                consumer=_text(row["consumer"]),  # type: ignore[arg-type]
                idle_ms=int(row["time_since_delivered"]),
                delivery_count=int(row["times_delivered"]),
            )
            for row in rows
        ]

    async def reclaim(
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int, count: int = 64
    ) -> list[Delivery]:
        response = await self._redis.xautoclaim(
            stream, group, consumer, min_idle_time=min_idle_ms, start_id="0-0", count=count
        )
        raw_entries = response[1]
        deleted = [_text(entry_id) for entry_id in response[2]] if len(response) > 2 else []
        if deleted:
            await self.ack(stream, group, deleted)
        if not raw_entries:
            return []
        async with self._redis.pipeline(transaction=False) as pipe:
            for raw_id, _ in raw_entries:
                pipe.xpending_range(stream, group, min=raw_id, max=raw_id, count=1)
            rows = await pipe.execute()
        counts = {_text(r[0]["message_id"]): int(r[0]["times_delivered"]) for r in rows if r}
        return await self._decode(stream, group, raw_entries, counts)

    async def touch(self, stream: str, group: str, consumer: str, entry_ids: Sequence[str]) -> None:
        if entry_ids:
            await self._redis.xclaim(
                stream, group, consumer, min_idle_time=0, message_ids=list(entry_ids), justid=True
            )

    async def trim(self, stream: str) -> int:
        return int(await self._trim_script(keys=[stream]))

    async def length(self, stream: str) -> int:
        return int(await self._redis.xlen(stream))

    async def delete(self, streams: Sequence[str]) -> None:
        if streams:
            await self._redis.delete(*streams)

    async def close(self) -> None:
        await self._redis.aclose()
