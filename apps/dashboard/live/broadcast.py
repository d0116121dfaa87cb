"""Send live data to a topic's dashboard clients: the one way it reaches them.

``publish("pool:cpu", snapshot)`` from synchronous code and ``await apublish(...)`` from asyncio
code. Both hand the payload to the channel layer group of that topic; the multiplexed consumer
(consumer.py) forwards it to each subscribed socket. Apps below the dashboard never call these:
they announce changes through ``apps.core.live`` and ``receivers`` publishes them. Publishers that
emit on every event can wrap their calls in a :class:`SnapshotThrottle` so a pool produces at most
a few snapshots per second however busy it is ("compact snapshots, at most a few per second per
pool").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from apps.dashboard.live.groups import topic_parse

logger = logging.getLogger(__name__)

EVENT_TYPE = "dashboard.event"


def _event(topic: str, payload: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    parsed = topic_parse(topic)
    return parsed.layer_group, {"type": EVENT_TYPE, "topic": str(parsed), "data": dict(payload)}


def publish(group: str, payload: Mapping[str, Any]) -> None:
    """Send ``payload`` (JSON-serialisable) to every client subscribed to ``group``.

    Call it from synchronous code only; asyncio code awaits :func:`apublish`. A missing channel
    layer is a configuration error in a web deployment but harmless for a CLI tool, so it is logged
    rather than raised.
    """
    layer = get_channel_layer()
    if layer is None:
        logger.warning("publish(%s): no channel layer configured; dropped", group)
        return
    layer_group, event = _event(group, payload)
    async_to_sync(layer.group_send)(layer_group, event)


async def apublish(group: str, payload: Mapping[str, Any]) -> None:
    """Asyncio twin of :func:`publish`."""
    layer = get_channel_layer()
    if layer is None:
        logger.warning("apublish(%s): no channel layer configured; dropped", group)
        return
    layer_group, event = _event(group, payload)
    await layer.group_send(layer_group, event)


@dataclass
class SnapshotThrottle:
    """Rate-limits snapshots per topic to one every ``min_interval_s`` seconds, keeping the latest.

    The caller passes the current time (monotonic seconds) so the class stays clock-free and
    testable. ``offer`` returns True when the snapshot should go out now; otherwise the newest one
    is kept and ``due`` hands it back once the interval has passed, so the last state is never lost.
    """

    min_interval_s: float = 0.25
    _last_sent: dict[str, float] = field(default_factory=dict)
    _pending: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def offer(self, topic: str, payload: Mapping[str, Any], now: float) -> bool:
        """Record ``payload`` as the newest state of ``topic``; True if it may be sent now."""
        last = self._last_sent.get(topic)
        if last is None or now - last >= self.min_interval_s:
            self._last_sent[topic] = now
            self._pending.pop(topic, None)
            return True
        self._pending[topic] = payload
        return False

    def due(self, now: float) -> list[tuple[str, Mapping[str, Any]]]:
        """Pending snapshots whose interval has passed; they are marked sent."""
        ready = [
            (topic, payload)
            for topic, payload in self._pending.items()
            if now - self._last_sent.get(topic, float("-inf")) >= self.min_interval_s
        ]
        for topic, _ in ready:
            self._last_sent[topic] = now
            del self._pending[topic]
        return ready
