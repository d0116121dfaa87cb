"""Job keys as the LLM router sees them: a Redis hash it reads (``workers.router.registry``).

The router authenticates every generation request with the job's API key but, like every
process outside the web tier, has no database. The control plane therefore keeps
``{prefix}:router:keys`` (sha256 of the key → job id) in step with the ``ApiKey`` rows: a job
key is published once its creation commits, withdrawn once its revocation or deletion commits
(``apps.jobs.apps`` wires the signals; ``services.api_key_revoke`` calls it, as ``update()``
sends none). ``router_keys_sync`` rebuilds the hash from the database (a fresh Redis, keys made
before this existed). Staff keys are not published: the router serves jobs.

In the embedded mode (no Redis) there is no router registry and these do nothing. A Redis that
refuses a write is logged, not raised: the database write stands, and ``router_keys_sync``
repairs the hash.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import redis
from django.db import DEFAULT_DB_ALIAS, transaction

from controlplane.redis_client import configured_redis, key_prefix
from workers.router.registry import RegistryNames

if TYPE_CHECKING:  # imported by apps.jobs.apps, before the models may load
    from apps.jobs.models import ApiKey

log = logging.getLogger("loom.auth")


def _hash_name() -> str:
    return RegistryNames(key_prefix()).keys


def _write(action: str, key_hash: str, job_id: int | None) -> None:
    client = configured_redis()
    if client is None:
        return
    try:
        if action == "publish":
            client.hset(_hash_name(), key_hash, str(job_id))
        else:
            client.hdel(_hash_name(), key_hash)
    except redis.RedisError:
        log.warning("router key registry: %s of a key failed; run router_keys_sync", action)


def router_key_published(*, api_key: ApiKey, using: str = DEFAULT_DB_ALIAS) -> None:
    """After the commit: the router accepts this (job, unrevoked) key."""
    if api_key.job_id is None or api_key.revoked_at is not None:
        return
    key_hash, job_id = api_key.key_hash, api_key.job_id
    transaction.on_commit(lambda: _write("publish", key_hash, job_id), using=using)


def router_key_withdrawn(*, key_hash: str, using: str = DEFAULT_DB_ALIAS) -> None:
    """After the commit: the router refuses this key."""
    transaction.on_commit(lambda: _write("withdraw", key_hash, None), using=using)


def router_keys_served() -> Any:
    """The keys the router accepts: a job's, not revoked (``ApiKey`` rows)."""
    from apps.jobs.models import ApiKey

    return ApiKey.objects.filter(job__isnull=False, revoked_at__isnull=True)


def router_keys_sync() -> int:
    """Rebuild the hash from the database; returns how many keys it holds."""
    client = configured_redis()
    if client is None:
        return 0
    rows = router_keys_served().values_list("key_hash", "job_id")
    mapping: dict[Any, Any] = {key_hash: str(job_id) for key_hash, job_id in rows}
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(_hash_name())
        if mapping:
            pipe.hset(_hash_name(), mapping=mapping)
        pipe.execute()
    return len(mapping)
