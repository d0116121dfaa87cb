"""Buffer definitions as the buffer service sees them: a Redis hash it can read.

The buffer service, like every process outside the web tier, has no database. The control plane
therefore keeps ``{prefix}:buffers:definitions`` (``Buffer.service_name`` → the definition as
JSON: schema, capacity, eviction, sampler, sync mode, prioritised, its enabled triggers) in step
with the rows, and announces each change on the channel ``{prefix}:buffers:changed`` (the
service name), so a running service can declare or drop that buffer without a restart. A
definition is published once a write to it or its triggers commits and withdrawn once its
deletion commits (``apps.buffers.apps`` wires the signals; a job's cascade sends them too).
``buffer_definitions_sync`` rebuilds the hash from the database.

In the embedded mode (no Redis) these do nothing. A Redis that refuses a write is logged, not
raised: the database write stands, and the sync repairs the hash.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis
from django.db import DEFAULT_DB_ALIAS, transaction

from apps.buffers.models import Buffer
from apps.buffers.selectors import buffer_definition
from controlplane.redis_client import configured_redis, key_prefix
from workers.buffers.definitions import BufferNames

log = logging.getLogger(__name__)


def service_definition(buffer: Buffer) -> dict[str, Any]:
    """What the service builds a buffer from: ``ExperienceBuffer(name, Schema(schema),
    capacity, eviction, prioritised)`` and each trigger bound by its name
    (``workers.buffers.definitions.buffer_from_definition``)."""
    return {
        **buffer_definition(buffer),
        "name": buffer.service_name,  # the job's buffers apart inside one service
        "job": buffer.job_id,
        "config": buffer.config,
        "triggers": [
            {"name": t.name, "kind": t.kind, "params": t.params, "target": t.target}
            for t in sorted(buffer.triggers.all(), key=lambda t: t.pk)  # declared order
            if t.enabled
        ],
    }


def _write(name: str, definition: str | None) -> None:
    client = configured_redis()
    if client is None:
        return
    names = BufferNames(key_prefix())
    try:
        with client.pipeline(transaction=True) as pipe:
            if definition is None:
                pipe.hdel(names.definitions, name)
            else:
                pipe.hset(names.definitions, name, definition)
            pipe.publish(names.changed, name)
            pipe.execute()
    except redis.RedisError:
        action = "withdrawal" if definition is None else "publication"
        log.warning("buffer registry: %s of %s failed; run buffers.sync", action, name)


def definition_published(*, buffer_id: int, using: str = DEFAULT_DB_ALIAS) -> None:
    """After the commit: the service serves this definition (as it stands then)."""
    if configured_redis() is None:
        return

    def publish() -> None:
        row = Buffer.objects.using(using).filter(pk=buffer_id).first()  # gone: withdrawn
        if row is not None:
            _write(row.service_name, json.dumps(service_definition(row)))

    transaction.on_commit(publish, using=using)


def definition_withdrawn(*, service_name: str, using: str = DEFAULT_DB_ALIAS) -> None:
    """After the commit: the service drops this buffer."""
    if configured_redis() is None:
        return
    transaction.on_commit(lambda: _write(service_name, None), using=using)


def served_definitions() -> dict[str, str]:
    """Every buffer the database defines, as a buffer service reads it: name → definition JSON."""
    rows = Buffer.objects.prefetch_related("triggers").order_by("id")
    return {row.service_name: json.dumps(service_definition(row)) for row in rows}


def buffer_definitions_sync() -> int:
    """Rebuild the hash from the database; returns how many definitions it holds."""
    client = configured_redis()
    if client is None:
        return 0
    names = BufferNames(key_prefix())
    mapping: dict[Any, Any] = served_definitions()
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(names.definitions)
        if mapping:
            pipe.hset(names.definitions, mapping=mapping)
        pipe.publish(names.changed, "*")
        pipe.execute()
    return len(mapping)
