"""Reads for actions: what a principal may see, the filtered list, and the submit catalog."""

from __future__ import annotations

import functools
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from apps.actions.models import Action
from apps.jobs.access import Principal, job_ids_filter
from apps.resources.generation import current as catalog_generation
from apps.resources.models import ApiQuota, PoolKind, ResourcePool, Service, Tool

# The pool kind that serves an action whose key resource is this one.
KIND_OF_RESOURCE = {
    "cpu": PoolKind.CPU,
    "memory_mb": PoolKind.CPU,
    "gpu": PoolKind.GPU,
    "gpu_memory_mb": PoolKind.GPU,
}


def action_queryset(*, principal: Principal) -> QuerySet[Action]:
    return Action.objects.filter(**job_ids_filter(principal)).select_related(
        "tool", "service", "pool", "node"
    )


def action_get(*, principal: Principal, action_id: int) -> Action:
    return get_object_or_404(action_queryset(principal=principal), pk=action_id)


def actions_in_bulk(*, action_ids: Collection[int]) -> dict[int, Action]:
    """Actions by id with the rows their representation names, in one query (no visibility
    check: for ids the caller already holds, such as a batch's idempotency hits)."""
    return Action.objects.select_related("tool", "service", "pool", "node").in_bulk(action_ids)


# What a result names (``ActionResultSerializer``): no related row, and none of the submission's
# own fields (command, payload, demand: an API call's payload can be large).
RESULT_FIELDS = (
    "id",
    "status",
    "exit_code",
    "output",
    "score",
    "error_reason",
    "allocation",
    "attempts",
    "submitted_at",
    "scheduled_at",
    "started_at",
    "finished_at",
)


def action_results(*, principal: Principal, action_ids: list[int]) -> QuerySet[Action]:
    """The visible ones of ``action_ids``, with only what their results show: no joins."""
    return Action.objects.filter(**job_ids_filter(principal), pk__in=action_ids).only(
        *RESULT_FIELDS
    )


def action_result_get(*, principal: Principal, action_id: int) -> Action:
    """The action for its result: no joins (a result names no related row), 404 if not visible."""
    return get_object_or_404(Action.objects.filter(**job_ids_filter(principal)), pk=action_id)


def action_list(
    *,
    principal: Principal,
    job_id: int | None = None,
    statuses: list[str] | None = None,
    trajectory_id: int | None = None,
    tool_name: str | None = None,
    service_name: str | None = None,
    submitted_after: datetime | None = None,
    submitted_before: datetime | None = None,
) -> QuerySet[Action]:
    actions = action_queryset(principal=principal)
    if job_id is not None:
        actions = actions.filter(job_id=job_id)
    if statuses:
        actions = actions.filter(status__in=statuses)
    if trajectory_id is not None:
        actions = actions.filter(trajectory_id=trajectory_id)
    if tool_name is not None:
        actions = actions.filter(tool__name=tool_name)
    if service_name is not None:
        actions = actions.filter(service__name=service_name)
    if submitted_after is not None:
        actions = actions.filter(submitted_at__gte=submitted_after)
    if submitted_before is not None:
        actions = actions.filter(submitted_at__lt=submitted_before)
    return actions


@dataclass
class SubmitCatalog:
    """Registered names: validating 10 000 items costs no queries. Shared between requests and
    threads (``submit_catalog`` caches it): read it, never change it."""

    tools: dict[str, Tool] = field(default_factory=dict)
    services: dict[str, Service] = field(default_factory=dict)
    api_quotas: dict[str, ApiQuota] = field(default_factory=dict)
    pools: dict[str, ResourcePool] = field(default_factory=dict)
    default_pool_by_kind: dict[str, int] = field(default_factory=dict)

    @functools.cached_property
    def _pools_by_id(self) -> dict[int | None, ResourcePool]:
        return {pool.pk: pool for pool in self.pools.values()}

    @functools.cached_property
    def _tools_by_id(self) -> dict[int | None, Tool]:
        return {tool.pk: tool for tool in self.tools.values()}

    @functools.cached_property
    def _services_by_id(self) -> dict[int | None, Service]:
        return {service.pk: service for service in self.services.values()}

    def pool_by_id(self, pool_id: int | None) -> ResourcePool | None:
        return self._pools_by_id.get(pool_id)

    def tool_by_id(self, tool_id: int | None) -> Tool | None:
        return self._tools_by_id.get(tool_id)

    def service_by_id(self, service_id: int | None) -> Service | None:
        return self._services_by_id.get(service_id)

    def pool_kind(self, pool_id: int | None) -> str | None:
        pool = self.pool_by_id(pool_id)
        return str(pool.kind) if pool is not None else None

    def default_pool_id(self, key_resource: str) -> int | None:
        if key_resource.startswith("api:"):
            quota = self.api_quotas.get(key_resource.removeprefix("api:"))
            if quota is not None and quota.pool_id is not None:
                return quota.pool_id
            return self.default_pool_by_kind.get(PoolKind.API)
        kind = KIND_OF_RESOURCE.get(key_resource)
        return self.default_pool_by_kind.get(kind) if kind else None


# A change that bypasses the model signals (QuerySet.update, raw SQL) bumps no generation: the
# cached catalog is read again at least this often, so such a change shows within it.
CATALOG_MAX_AGE_S = 5.0
_cached_catalog: tuple[tuple[int, int], float, SubmitCatalog] | None = None


def submit_catalog(*, fresh: bool = False) -> SubmitCatalog:
    """The registered names, cached per catalog generation (``apps.resources.generation``) for
    at most ``CATALOG_MAX_AGE_S``; ``fresh`` reads them again whatever the generation says."""
    global _cached_catalog
    generation = catalog_generation()
    now = time.monotonic()
    cached = _cached_catalog
    if (
        not fresh
        and cached is not None
        and cached[0] == generation
        and now - cached[1] < CATALOG_MAX_AGE_S
    ):
        return cached[2]
    catalog = _load_catalog()
    _cached_catalog = (generation, now, catalog)
    return catalog


def _load_catalog() -> SubmitCatalog:
    catalog = SubmitCatalog(
        tools={tool.name: tool for tool in Tool.objects.all()},
        services={service.name: service for service in Service.objects.all()},
        api_quotas={quota.name: quota for quota in ApiQuota.objects.all()},
        pools={pool.name: pool for pool in ResourcePool.objects.order_by("id")},
    )
    for pool in catalog.pools.values():
        catalog.default_pool_by_kind.setdefault(pool.kind, pool.pk)
    return catalog
