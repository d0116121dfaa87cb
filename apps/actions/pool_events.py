"""Tell a pool's scheduler service about submissions and cancellations (after commit).

The database is the system of record; these events only wake the scheduler. If one is lost (the
web process dies between commit and publish), nothing is: the scheduler loads every queued
action of its pool when it starts. Three ways to deliver, chosen by configuration only:
the embedded runtime in this process (demo), Redis Streams (``REDIS_URL``), or nobody listening
(tests without a scheduler: actions stay queued, nothing pretends to run them).
"""

from __future__ import annotations

import functools
import os
from collections import defaultdict
from collections.abc import Iterable

import redis
from django.conf import settings
from django.db import transaction

from apps.resources.models import ResourcePool
from workers.transport import ActionsCancelled, ActionsSubmitted, Message, StreamNames
from workers.transport.messages import encode_json


@functools.cache
def _redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def _pool_names(pool_ids: Iterable[int]) -> dict[int, str]:
    return dict(ResourcePool.objects.filter(pk__in=list(pool_ids)).values_list("pk", "name"))


def stream_prefix() -> str:
    """Key prefix of the streams: ``settings.LOOM_STREAM_PREFIX``, else the environment's."""
    configured = getattr(settings, "LOOM_STREAM_PREFIX", None)
    return str(configured or os.environ.get("LOOM_STREAM_PREFIX") or "loom")


def publish(pool: str, message: Message) -> None:
    from apps.actions.runtime import current_runtime

    runtime = current_runtime()
    if runtime is not None:
        runtime.publish_threadsafe(runtime.streams.events(pool), message)
    elif settings.REDIS_URL:
        stream = StreamNames(prefix=stream_prefix()).events(pool)
        _redis_client(settings.REDIS_URL).xadd(stream, {"m": encode_json(message)})


def _announce(
    pairs: list[tuple[int, int]], build: type[ActionsSubmitted | ActionsCancelled]
) -> None:
    by_pool: dict[int, list[int]] = defaultdict(list)
    for action_id, pool_id in pairs:
        by_pool[pool_id].append(action_id)
    names = _pool_names(by_pool)
    for pool_id, action_ids in by_pool.items():
        if pool_id in names:
            publish(names[pool_id], build(action_ids=tuple(action_ids)))


def announce_submitted(pairs: Iterable[tuple[int, int | None]]) -> None:
    """``(action id, pool id)`` pairs just inserted: wake their schedulers after commit."""
    known = [(a, p) for a, p in pairs if p is not None]
    if known:
        transaction.on_commit(functools.partial(_announce, known, ActionsSubmitted))


def announce_cancelled(pairs: Iterable[tuple[int, int | None]]) -> None:
    known = [(a, p) for a, p in pairs if p is not None]
    if known:
        transaction.on_commit(functools.partial(_announce, known, ActionsCancelled))
