"""The transport interface shared by the Redis Streams and the in-process implementations.

Semantics (both implementations, checked by one contract suite in tests/workers/transport/):

- ``publish`` appends a message to a stream and returns its entry id (ids increase).
- A consumer group delivers each entry to exactly one consumer of the group (``read``); the entry
  stays *pending* for that consumer until ``ack``. At-least-once: an entry whose consumer died
  (pending and idle for ``min_idle_ms``) is handed to another consumer by ``reclaim`` (XAUTOCLAIM),
  with its delivery count incremented.
- ``touch`` resets the idle time of entries a live consumer is still working on, so a long action
  is not reclaimed from a live agent (XCLAIM ... JUSTID with min-idle 0).
- ``read`` returns at most ``count`` deliveries (batched reads) and blocks at most ``block_ms``.
- ``ack`` takes many ids in one round trip (pipelined acks); ``publish_and_ack`` sends results
  and acknowledges the dispatches they answer atomically (Redis: one MULTI/EXEC).
- ``trim`` removes the entries that *every* group of the stream has had delivered and
  acknowledged, and nothing else: no group's pending entries (a consumer restarted after a crash
  re-reads them, an agent reclaims them) nor its undelivered tail. A stream without a group is
  never trimmed. Acknowledging trims the stream itself, at most every ``trim_interval_s`` per
  stream, so streams stay bounded by what is unacknowledged plus one interval's acknowledged
  entries — with no trimmer process, and with no XADD MAXLEN, which would drop unread entries.
- A group created later sees every entry still in the stream: all of it until the stream is
  first trimmed, afterwards what some existing group has not acknowledged yet. Loom creates each
  group before anything it must see is trimmed: an agent creates ``agents`` on its dispatch
  stream before it registers (no dispatch comes before), the scheduler ``scheduler`` on its events
  stream before it reads, and events published before that stay whole (no group, no trimming).
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from workers.transport.messages import Message

logger = logging.getLogger(__name__)

TRIM_INTERVAL_S = 2.0


@dataclass(frozen=True)
class Delivery:
    """One stream entry handed to a consumer. ``delivery_count`` > 1 means redelivered."""

    stream: str
    entry_id: str
    message: Message
    delivery_count: int = 1


@dataclass(frozen=True)
class PendingEntry:
    """An entry delivered but not yet acknowledged."""

    entry_id: str
    consumer: str
    idle_ms: int
    delivery_count: int


class Transport(abc.ABC):
    """Acknowledged, at-least-once message streams with consumer groups (DESIGN.md Processes)."""

    def __init__(self, *, trim_interval_s: float = TRIM_INTERVAL_S) -> None:
        """``trim_interval_s``: the least time between two trims of one stream after acks."""
        self.trim_interval_s = trim_interval_s
        self._trimmed_at: dict[str, float] = {}

    @abc.abstractmethod
    async def ensure_group(self, stream: str, group: str) -> None:
        """Create the stream and the group if missing; a new group sees every entry not trimmed."""

    @abc.abstractmethod
    async def publish(self, stream: str, message: Message) -> str:
        """Append one message; returns its entry id."""

    @abc.abstractmethod
    async def publish_many(self, stream: str, messages: Sequence[Message]) -> list[str]:
        """Append several messages in one round trip; returns their ids in order."""

    @abc.abstractmethod
    async def read(
        self, stream: str, group: str, consumer: str, *, count: int = 64, block_ms: int = 1000
    ) -> list[Delivery]:
        """New entries for this consumer (up to ``count``), waiting up to ``block_ms``."""

    @abc.abstractmethod
    async def ack(self, stream: str, group: str, entry_ids: Sequence[str]) -> int:
        """Acknowledge entries; returns how many were pending."""

    @abc.abstractmethod
    async def pending(self, stream: str, group: str, *, count: int = 1000) -> list[PendingEntry]:
        """Entries delivered to the group's consumers and not acknowledged, oldest first."""

    @abc.abstractmethod
    async def reclaim(
        self, stream: str, group: str, consumer: str, *, min_idle_ms: int, count: int = 64
    ) -> list[Delivery]:
        """Take over entries pending longer than ``min_idle_ms`` (any consumer) for ``consumer``."""

    @abc.abstractmethod
    async def touch(self, stream: str, group: str, consumer: str, entry_ids: Sequence[str]) -> None:
        """Reset the idle time of entries ``consumer`` still works on."""

    async def publish_and_ack(
        self,
        stream: str,
        messages: Sequence[Message],
        ack_stream: str,
        group: str,
        entry_ids: Sequence[str],
    ) -> None:
        """Publish ``messages`` (results), then ack the entries they answer (dispatches).

        Redis does both in one MULTI/EXEC round trip, so a result is never lost and never
        acknowledged without being published.
        """
        if messages:
            await self.publish_many(stream, messages)
        await self.ack(ack_stream, group, entry_ids)

    @abc.abstractmethod
    async def trim(self, stream: str) -> int:
        """Remove the entries every group of the stream acknowledged; returns how many.

        The safe point is the minimum over the groups of the oldest pending entry, or (none
        pending) the entry after the last one delivered to the group; entries before it go.
        """

    async def _trim_after_ack(self, stream: str) -> None:
        """Trim ``stream`` if its last trim (or, the first time, its first ack here) is
        ``trim_interval_s`` old. Housekeeping: an error is logged, never raised, as the
        acknowledgement itself has succeeded."""
        now = time.monotonic()
        if now - self._trimmed_at.setdefault(stream, now) < self.trim_interval_s:
            return
        self._trimmed_at[stream] = now
        try:
            await self.trim(stream)
        except Exception as exc:
            logger.warning("trimming %s failed: %s", stream, exc)

    @abc.abstractmethod
    async def length(self, stream: str) -> int:
        """Number of entries in the stream (acknowledged ones included until trimmed)."""

    @abc.abstractmethod
    async def delete(self, streams: Sequence[str]) -> None:
        """Remove streams entirely (tests and teardown)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections; the transport is unusable afterwards."""
