"""Tell a pool's scheduler service about submissions and cancellations (after commit).

The database is the system of record; these events only wake the scheduler. If one is lost (the
web process dies between commit and publish), nothing is: the scheduler loads every queued
action of its pool when it starts. Three ways to deliver, chosen by configuration only: the
embedded runtime in this process (the demo's, which routes them with ``in_process_route_set``),
Redis Streams (``REDIS_URL``), or nobody listening (tests without a scheduler: actions stay
queued, nothing pretends to run them).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import fields

from django.db import transaction

from apps.actions.models import Action, ActionStatus
from apps.resources.models import ResourcePool
from controlplane.redis_client import configured_redis, key_prefix
from workers.transport import ActionsCancelled, ActionsSubmitted, Message, StreamNames
from workers.transport.messages import encode_json


def _pool_names(pool_ids: Collection[int]) -> dict[int, str]:
    """Names from the cached submit catalog; a pool it does not know is read from the table."""
    from apps.actions.selectors import submit_catalog

    catalog = submit_catalog()
    names = {}
    for pool_id in pool_ids:
        pool = catalog.pool_by_id(pool_id)
        if pool is not None:
            names[pool_id] = pool.name
    missing = [pool_id for pool_id in pool_ids if pool_id not in names]
    if missing:
        names.update(ResourcePool.objects.filter(pk__in=missing).values_list("pk", "name"))
    return names


RECORDS_UP_TO = 100  # actions per announcement that carry their records


# Where a process that runs its schedulers in-process (``apps.embedded.runtime``) takes the events
# while it runs: (pool, message), from any thread.
InProcessRoute = Callable[[str, Message], object]
_in_process_route: InProcessRoute | None = None


def in_process_route_set(route: InProcessRoute) -> None:
    """Send this process's pool events to ``route`` from now on."""
    global _in_process_route
    _in_process_route = route


def in_process_route_clear(route: InProcessRoute) -> None:
    """Stop sending to ``route`` (back to Redis, or nobody); a route set since then stays."""
    global _in_process_route
    if _in_process_route == route:  # a bound method is a new object on each access
        _in_process_route = None


def publish(pool: str, message: Message) -> None:
    route = _in_process_route
    if route is not None:
        route(pool, message)
    elif (client := configured_redis()) is not None:
        stream = StreamNames(prefix=key_prefix()).events(pool)
        # No MAXLEN: it would drop events the scheduler has not read. Its acknowledgements trim
        # the stream instead (workers/transport/base.py, ``Transport.trim``).
        client.xadd(stream, {"m": encode_json(message)})


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


def _announce_new(actions: list[Action]) -> None:
    """Like ``_announce``, but a small submission carries its records (the scheduler then reads
    no row); a big one is announced by id and loaded by the scheduler in chunks."""
    from apps.actions.scheduler_store import new_action_record
    from apps.actions.selectors import submit_catalog

    by_pool: dict[int, list[Action]] = defaultdict(list)
    for action in actions:
        if action.pool_id is not None:
            by_pool[action.pool_id].append(action)
    catalog = submit_catalog()
    names = _pool_names(by_pool)
    for pool_id, members in by_pool.items():
        if pool_id not in names:
            continue
        pool = catalog.pool_by_id(pool_id)
        records = []
        if pool is not None and len(actions) <= RECORDS_UP_TO:
            for action in members:
                tool = catalog.tool_by_id(action.tool_id)
                service = catalog.service_by_id(action.service_id)
                known_tool = action.tool_id is None or tool is not None
                if known_tool and (action.service_id is None or service is not None):
                    record = new_action_record(action, tool, str(pool.kind), service)
                    records.append({f.name: getattr(record, f.name) for f in fields(record)})
        message = ActionsSubmitted(action_ids=tuple(a.pk for a in members), records=tuple(records))
        publish(names[pool_id], message)


def announce_submitted(actions: Iterable[Action]) -> None:
    """Actions just inserted: wake their schedulers after commit."""
    new = list(actions)
    if new:
        transaction.on_commit(functools.partial(_announce_new, new))


def announce_replayed(actions: Iterable[Action]) -> None:
    """Actions a client submitted again under their idempotency keys: those still queued are
    announced once more, by id only (the scheduler reads their rows, so an action that has moved
    on since is not queued again). The first announcement may never have gone out: the web
    process can die between its commit and its publish, and the client's retry lands here."""
    queued = {(a.pk, a.pool_id) for a in actions if a.status == ActionStatus.QUEUED}
    known = sorted((a, p) for a, p in queued if p is not None)
    if known:
        transaction.on_commit(functools.partial(_announce, known, ActionsSubmitted))


def announce_cancelled(pairs: Iterable[tuple[int, int | None]]) -> None:
    known = [(a, p) for a, p in pairs if p is not None]
    if known:
        transaction.on_commit(functools.partial(_announce, known, ActionsCancelled))
