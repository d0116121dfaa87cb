"""Database-backed snapshot publishing for the topics someone in this process is watching.

The scheduler publishes pool snapshots from memory (cheap and exact, arl-tangram §5). Until it runs,
and for node and job topics, :class:`LivePublisher` computes the same snapshots from the database
every ``interval_s`` — but only for topics that a socket of *this* process subscribes to, and only
while at least one socket is open. A dashboard nobody watches costs nothing; one that is watched
costs one bounded snapshot query set per watched topic per interval, however many actions flow
("at most a few per second per pool").

It runs as an asyncio task on the ASGI server's own event loop (started by the first consumer), so
the in-memory channel layer of the embedded mode is only ever touched from that loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter

from channels.db import database_sync_to_async
from django.conf import settings

from apps.dashboard.live.broadcast import apublish
from apps.dashboard.live.groups import Topic
from apps.dashboard.live.snapshots import snapshots_collect

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 1.0


class LivePublisher:
    """Per-process registry of watched topics plus the loop that publishes their snapshots."""

    def __init__(self, interval_s: float | None = None) -> None:
        self.interval_s = interval_s
        self.sockets = 0
        self.watched: Counter[Topic] = Counter()
        self.cycles = 0
        self.busy_s = 0.0
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return bool(getattr(settings, "LOOM_DASHBOARD_DB_SNAPSHOTS", True))

    def period_s(self) -> float:
        if self.interval_s is not None:
            return self.interval_s
        return float(getattr(settings, "LOOM_DASHBOARD_SNAPSHOT_INTERVAL_S", DEFAULT_INTERVAL_S))

    def socket_opened(self) -> None:
        self.sockets += 1
        if self.enabled and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    def socket_closed(self, topics: list[Topic]) -> None:
        self.sockets = max(0, self.sockets - 1)
        for topic in topics:
            self.unwatch(topic)

    def watch(self, topic: Topic) -> None:
        self.watched[topic] += 1

    def unwatch(self, topic: Topic) -> None:
        self.watched[topic] -= 1
        if self.watched[topic] <= 0:
            del self.watched[topic]

    async def publish_once(self) -> int:
        topics = list(self.watched)
        if not topics:
            return 0
        snapshots = await database_sync_to_async(snapshots_collect)(topics)
        for topic, snapshot in snapshots:
            await apublish(topic, snapshot)
        return len(snapshots)

    async def _run(self) -> None:
        while self.sockets > 0:
            started = time.perf_counter()
            try:
                await self.publish_once()
            except Exception:  # one bad cycle must not end live updates
                logger.exception("dashboard snapshot publishing failed")
            elapsed = time.perf_counter() - started
            self.busy_s += elapsed
            self.cycles += 1
            await asyncio.sleep(max(0.05, self.period_s() - elapsed))


live_publisher = LivePublisher()
