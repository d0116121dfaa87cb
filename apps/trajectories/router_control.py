"""The control plane's side of the live LLM routers (Loom's own): the policy an operator sets
for a router, and the newest report of each LLM worker behind it.

``router_policy_set`` stores a router's routing policy and length predictor with a new version,
who changed it and when, and — once the change commits — writes it to Redis
(``{prefix}:router:policy:{router}``) and announces it on ``{prefix}:router:policy-changed``;
the running router follows the key (``workers.router.live_policy``). ``router_policies_sync``
(the router sync beat task) rewrites every stored policy, repairing a write Redis refused.

``llm_worker_reports_apply`` keeps, per router and worker, the newest ``workers`` entry the
router appends to its state stream after each read of its workers' metrics
(``router_state`` hands them over).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import redis
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from apps.trajectories.models import LLMWorkerReport, RouterPolicy
from controlplane.redis_client import configured_redis, key_prefix
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.router_control")

ROUTER_NAME_MAX = 100
_COUNT_FIELDS = ("running_requests", "queued_requests", "kv_used_tokens")


def router_policy_stored(row: RouterPolicy) -> str:
    """A router's policy as the router reads it (``workers.router.live_policy``): JSON."""
    return json.dumps(
        {
            "version": row.version,
            "policy": row.policy,
            "predictor": row.predictor,
            "changed_by": row.changed_by.get_username() if row.changed_by else None,
            "changed_at": row.changed_at.isoformat(),
        }
    )


def _publish(row: RouterPolicy) -> None:
    client = configured_redis()
    if client is None:
        return
    names = RegistryNames(key_prefix())
    try:
        client.set(names.router_policy(row.router), router_policy_stored(row))
        client.publish(names.router_policy_changed, row.router)
    except redis.RedisError:
        log.warning("router policy of %s not published; the router sync repairs it", row.router)


def router_policy_set(
    *, router: str, policy: str, predictor: str, user: AbstractBaseUser | AnonymousUser | None
) -> RouterPolicy:
    """Store the router's new policy (validated by the caller) and publish it on commit."""
    changed_by = user if isinstance(user, AbstractBaseUser) else None
    with transaction.atomic():
        row = RouterPolicy.objects.select_for_update().filter(router=router).first()
        if row is None:
            row = RouterPolicy(router=router, version=0)
        row.policy, row.predictor = policy, predictor
        row.version += 1
        row.changed_by = changed_by  # type: ignore[assignment]
        row.changed_at = timezone.now()
        row.save()
        transaction.on_commit(lambda: _publish(row))
    return row


def router_policies_sync() -> int:
    """Rewrite every stored policy to Redis (a restarted Redis, a refused write)."""
    rows = list(RouterPolicy.objects.select_related("changed_by"))
    for row in rows:
        _publish(row)
    return len(rows)


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


def _rate(value: Any, *, at_most: float | None = None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ValueError("not a non-negative number")
    return float(min(value, at_most) if at_most is not None else value)


def _report_fields(worker: Mapping[str, Any]) -> dict[str, Any]:
    """One worker of a ``workers`` entry as row fields; ValueError if it is malformed."""
    metrics = worker.get("metrics") or {}
    if not isinstance(metrics, Mapping):
        raise ValueError("metrics: not an object")
    fields: dict[str, Any] = {
        "url": str(worker.get("url", ""))[:300],
        "healthy": bool(worker.get("healthy", True)),
        "draining": bool(worker.get("draining", False)),
        "in_flight": _count(worker.get("in_flight", 0)) or 0,
        "kv_usage": _rate(metrics.get("kv_usage"), at_most=1.0),
        "generation_tokens_per_s": _rate(metrics.get("generation_tokens_per_s")),
    }
    for field in _COUNT_FIELDS:
        fields[field] = _count(metrics.get(field))
    return fields


def llm_worker_reports_apply(entries: Iterable[Mapping[str, Any]]) -> tuple[int, int]:
    """Keep the newest report of each (router, worker) among ``entries`` (stream order);
    (workers stored, entries or workers skipped as malformed)."""
    latest: dict[tuple[str, str], tuple[dict[str, Any], datetime]] = {}
    skipped = 0
    for entry in entries:
        router = entry.get("router")
        workers = entry.get("workers")
        at = entry.get("at")
        if (
            not isinstance(router, str)
            or not router
            or not isinstance(workers, list)
            or isinstance(at, bool)
            or not isinstance(at, (int, float))
        ):
            skipped += 1
            continue
        reported_at = datetime.fromtimestamp(at, tz=UTC)
        for worker in workers:
            try:
                name = worker["name"]
                if not isinstance(name, str) or not name:
                    raise ValueError("name")
                latest[router[:ROUTER_NAME_MAX], name[:100]] = (_report_fields(worker), reported_at)
            except (KeyError, TypeError, ValueError):
                skipped += 1
    for (router, name), (fields, reported_at) in latest.items():
        LLMWorkerReport.objects.update_or_create(
            router=router, name=name, defaults={**fields, "reported_at": reported_at}
        )
    return len(latest), skipped
