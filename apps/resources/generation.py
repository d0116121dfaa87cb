"""A generation number for the submit catalog (pools, tools, services, API quotas).

Every save or delete of one of those rows bumps it — at once and again when the transaction
commits, so a reader that cached the old rows between the two still sees a newer generation.
Readers cache what they derive from the catalog (``apps.actions.selectors.submit_catalog``)
keyed by the generation: a submit then costs no catalog query. Across processes the number
lives in Redis (``<prefix>:catalog-generation``, read at most every ``SHARED_CHECK_S``); without
Redis (the embedded mode: one process) a process-local counter is the whole truth.

Writes that bypass model signals (``QuerySet.update``, raw SQL) do not bump it; the submit path
therefore re-validates against a fresh catalog before it rejects a name or when an insert hits
a foreign key that has gone (see ``apps.actions.apis``), and a cached catalog is never older
than ``apps.actions.selectors.CATALOG_MAX_AGE_S``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.db import transaction

from controlplane.redis_client import configured_redis, key_prefix

SHARED_CHECK_S = 0.1  # how often the shared number is read (changes elsewhere show within it)

_local_value = 0
_lock = threading.Lock()
_shared: tuple[float, int] = (float("-inf"), 0)  # (monotonic time read, value)


def _redis_key() -> str:
    return f"{key_prefix()}:catalog-generation"


def current() -> tuple[int, int]:
    """(process-local generation, shared generation); either changing means the catalog did.

    This process's own changes show at once (the local number); another process's within
    ``SHARED_CHECK_S`` — a submit checks the catalog several times, one Redis read serves them.
    """
    global _shared
    client = configured_redis()
    if client is None:
        return _local_value, 0
    read_at, value = _shared
    now = time.monotonic()
    if now - read_at >= SHARED_CHECK_S:
        value = int(client.get(_redis_key()) or 0)
        _shared = (now, value)
    return _local_value, value


def bump() -> None:
    global _local_value
    with _lock:
        _local_value += 1
    client = configured_redis()
    if client is not None:
        client.incr(_redis_key())


def on_catalog_change(sender: Any, **kwargs: Any) -> None:
    """post_save / post_delete receiver for the catalog models."""
    bump()
    transaction.on_commit(bump, robust=True)
