"""The dashboard's side of ``apps.core.live``: what lower apps announce, published to topics.

Registered by ``DashboardConfig.ready()``. A committed change (a node drained, a policy saved, an
action cancelled) becomes the changed object's fresh snapshot on its topic; a scheduler's
in-memory pool snapshot goes out as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from apps.core.live import Change, live_receiver_register
from apps.dashboard.live.broadcast import apublish, publish
from apps.dashboard.live.groups import Topic, TopicKind
from apps.dashboard.live.snapshots import snapshot_for


def changes_publish(changes: Sequence[Change]) -> None:
    """Each changed object's snapshot, read after the commit, to its topic's subscribers."""
    for change in changes:
        topic = Topic(TopicKind(change.subject), change.key)
        snapshot = snapshot_for(topic)
        if snapshot is not None:
            publish(str(topic), snapshot)


async def pool_snapshot_forward(pool: str, snapshot: Mapping[str, Any]) -> None:
    await apublish(str(Topic(TopicKind.POOL, pool)), snapshot)


def live_receivers_register() -> None:
    live_receiver_register(changes=changes_publish, pool_snapshots=pool_snapshot_forward)
