"""A generation number for the submit catalog (pools, tools, services, API quotas).

Every save or delete of one of those rows bumps it — at once and again when the transaction
commits, so a reader that cached the old rows between the two still sees a newer generation.
Readers cache what they derive from the catalog (``apps.actions.selectors.submit_catalog``)
keyed by the generation: a submit then costs no catalog query. Across processes the number
lives in Redis (``<prefix>:catalog-generation``, one GET per check); without Redis (the
embedded mode: one process) a process-local counter is the whole truth.

Writes that bypass model signals (``QuerySet.update``, raw SQL) do not bump it; the submit path
therefore re-validates against a fresh catalog before it rejects a name or when an insert hits
a foreign key that has gone (see ``apps.actions.apis``).
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import transaction

from controlplane.redis_client import configured_redis, key_prefix

_local_value = 0
_lock = threading.Lock()


def _redis_key() -> str:
    return f"{key_prefix()}:catalog-generation"


def current() -> tuple[int, int]:
    """(process-local generation, shared generation); either changing means the catalog did."""
    client = configured_redis()
    shared = int(client.get(_redis_key()) or 0) if client is not None else 0
    return _local_value, shared


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
