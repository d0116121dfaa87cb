"""Reads behind each dashboard page (STYLE.md item 1: reads live in selectors).

Each returns plain JSON-ready dicts in the shapes frontend/src/types.ts names. Query counts are
bounded by the number of pools / nodes on the page, never by the number of actions.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from apps.actions.models import ACTIVE_STATUSES, ALLOCATED_STATUSES, Action, ActionStatus
from apps.dashboard.live.snapshots import node_view
from apps.dashboard.policy_fields import POLICY_FIELDS, policy_defaults
from apps.dashboard.waiting import PoolState, WaitingAction, wait_reason
from apps.jobs.models import Job
from apps.metrics.measures import (
    active_trajectories,
    allocation_units,
    job_counts,
    pool_capacity,
    pool_snapshot,
    recent_act,
)
from apps.metrics.selectors import job_history, pool_history
from apps.metrics.stats import act_stats, histogram, seconds_between
from apps.policies.models import Policy, PolicyKind
from apps.resources.models import ApiQuota, Node, ResourcePool
from apps.trajectories.models import TERMINAL_TRAJECTORY_STATUSES, Trajectory

OUTPUT_TAIL_BYTES = 64 * 1024
ACTIONS_PAGE_SIZE = 50
BREAKDOWN_SAMPLE = 2000
FILTERABLE_STATUSES = {status.value for status in ActionStatus}


def overview(now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    pools = list(ResourcePool.objects.all())
    return {
        "pools": [pool_snapshot(pool, now) for pool in pools],
        "history": pool_history(pools=pools),
    }


def pool_detail(pool: ResourcePool, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    nodes = Node.objects.filter(pool=pool).select_related("pool").order_by("name")
    return {
        "pool": pool_snapshot(pool, now),
        "nodes": [node_view(node, now) for node in nodes],
        "history": pool_history(pools=[pool])[pool.name],
    }


def jobs_list(limit: int = 200) -> list[dict[str, Any]]:
    """Jobs with per-status action counts (one GROUP BY for all of them)."""
    jobs = list(Job.objects.order_by("-id")[:limit])
    counts: dict[int, dict[str, int]] = {job.pk: {} for job in jobs}
    rows = Action.objects.filter(job__in=jobs).values("job_id", "status").annotate(n=Count("id"))
    for row in rows:
        counts[row["job_id"]][row["status"]] = row["n"]
    now = timezone.now()
    return [
        {
            "id": job.pk,
            "name": job.name,
            "status": job.status,
            "counts": counts[job.pk],
            "act": recent_act(Action.objects.filter(job=job), now),
        }
        for job in jobs
    ]


def _phase_stats(values: list[float]) -> dict[str, float | None]:
    stats = act_stats(values)
    return {"mean": stats["mean"], "p99": stats["p99"]}


def act_breakdown(job: Job) -> dict[str, Any]:
    """Queueing (submitted→scheduled), overhead (scheduled→started), execution (→finished)."""
    rows = (
        Action.objects.filter(job=job, status=ActionStatus.SUCCEEDED, started_at__isnull=False)
        .order_by("-finished_at")
        .values_list("submitted_at", "scheduled_at", "started_at", "finished_at")[:BREAKDOWN_SAMPLE]
    )
    queueing, overhead, execution = [], [], []
    for submitted, scheduled, started, finished in rows:
        scheduled = scheduled or started
        queueing.append(seconds_between(submitted, scheduled) or 0.0)
        overhead.append(max(0.0, seconds_between(scheduled, started) or 0.0))
        execution.append(seconds_between(started, finished) or 0.0)
    return {
        "queueing": _phase_stats(queueing),
        "execution": _phase_stats(execution),
        "overhead": _phase_stats(overhead),
        "n": len(rows),
    }


def job_detail(job: Job, now: datetime | None = None) -> dict[str, Any]:
    now = now or timezone.now()
    steps = list(
        Trajectory.objects.filter(job=job).order_by("-id").values_list("steps", flat=True)[:5000]
    )
    return {
        "job": {
            "id": job.pk,
            "name": job.name,
            "status": job.status,
            "counts": job_counts(job),
            "act": recent_act(Action.objects.filter(job=job), now),
        },
        "act_breakdown": act_breakdown(job),
        "trajectories": {
            "active": active_trajectories(job),
            "total": Trajectory.objects.filter(job=job).count(),
            "finished": Trajectory.objects.filter(
                job=job, status__in=TERMINAL_TRAJECTORY_STATUSES
            ).count(),
            "length_histogram": histogram([float(s) for s in steps]),
        },
        "history": job_history(job=job),
    }


class FilterError(ValueError):
    """A filter value the actions table cannot apply; ``field`` names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def filter_actions(job: Job, filters: dict[str, str]) -> QuerySet[Action]:
    """The job's actions narrowed by the URL's filters (status, tool, pool, trajectory)."""
    actions = Action.objects.filter(job=job)
    status = filters.get("status")
    if status:
        if status not in FILTERABLE_STATUSES:
            raise FilterError("status", f"unknown status {status!r}")
        actions = actions.filter(status=status)
    if filters.get("tool"):
        actions = actions.filter(Q(tool__name=filters["tool"]) | Q(service__name=filters["tool"]))
    if filters.get("pool"):
        actions = actions.filter(pool__name=filters["pool"])
    if filters.get("trajectory"):
        if not filters["trajectory"].isdigit():
            raise FilterError("trajectory", "must be a trajectory id")
        actions = actions.filter(trajectory_id=int(filters["trajectory"]))
    return actions


def _pool_states(pool_ids: set[int]) -> dict[int, PoolState]:
    states: dict[int, PoolState] = {}
    for pool in ResourcePool.objects.filter(pk__in=pool_ids):
        capacity = pool_capacity(pool)
        limits = dict(ApiQuota.objects.filter(pool=pool).values_list("name", "concurrency_limit"))
        running_by_quota: dict[str, int] = {}
        for key in Action.objects.filter(pool=pool, status__in=ALLOCATED_STATUSES).values_list(
            "key_resource", flat=True
        ):
            if key.startswith("api:"):
                quota = key.removeprefix("api:")
                running_by_quota[quota] = running_by_quota.get(quota, 0) + 1
        loaded: set[str] = set()
        for usage in Node.objects.filter(pool=pool).values_list("usage", flat=True):
            if isinstance(usage, dict):
                for service in usage.get("services", []):
                    if isinstance(service, dict) and service.get("state") in ("ready", "loaded"):
                        loaded.add(str(service.get("name")))
        states[pool.pk] = PoolState(
            name=pool.name,
            online_nodes=capacity["online_nodes"],
            free_units={
                "cpu": capacity["cores_total"] - capacity["cores_held"],
                "gpu": capacity["gpus_total"] - capacity["gpus_held"],
            },
            total_units={"cpu": capacity["cores_total"], "gpu": capacity["gpus_total"]},
            quota_in_use=running_by_quota,
            quota_limit=limits,
            loaded_services=frozenset(loaded),
        )
    return states


def _action_row(action: Action, reason: str | None) -> dict[str, Any]:
    tool = action.tool.name if action.tool else action.service.name if action.service else None
    return {
        "id": action.pk,
        "status": action.status,
        "tool": tool,
        "pool": action.pool.name if action.pool else None,
        "trajectory": action.trajectory_id,
        "submitted_at": action.submitted_at.isoformat(),
        "started_at": action.started_at.isoformat() if action.started_at else None,
        "finished_at": action.finished_at.isoformat() if action.finished_at else None,
        "act_s": seconds_between(action.submitted_at, action.finished_at),
        "wait_reason": reason,
    }


def wait_reasons(actions: list[Action]) -> dict[int, str]:
    """Why each queued action in ``actions`` waits (queries bounded by the pools involved)."""
    queued = [a for a in actions if a.status == ActionStatus.QUEUED]
    if not queued:
        return {}
    states = _pool_states({a.pool_id for a in queued if a.pool_id is not None})
    return {
        action.pk: wait_reason(
            WaitingAction(
                key_resource=action.key_resource,
                min_units=action.min_units,
                queued_ahead=int(getattr(action, "queued_ahead", 0) or 0),
                service=action.service.name if action.service else None,
            ),
            states.get(action.pool_id) if action.pool_id is not None else None,
        )
        for action in queued
    }


def _with_queue_position(actions: QuerySet[Action]) -> QuerySet[Action]:
    ahead = (
        Action.objects.filter(
            pool=OuterRef("pool"),
            status=ActionStatus.QUEUED,
            submitted_at__lt=OuterRef("submitted_at"),
        )
        .order_by()
        .values("pool")
        .annotate(n=Count("id"))
        .values("n")
    )
    return actions.annotate(queued_ahead=Subquery(ahead))


def job_actions(
    job: Job, filters: dict[str, str], cursor: str | None = None, limit: int = ACTIONS_PAGE_SIZE
) -> dict[str, Any]:
    """One page of the job's actions, newest first, keyset-paginated by id."""
    actions = filter_actions(job, filters)
    total = actions.count()
    if cursor:
        if not cursor.isdigit():
            raise FilterError("cursor", "malformed cursor")
        actions = actions.filter(pk__lt=int(cursor))
    page = list(
        _with_queue_position(actions.select_related("tool", "service", "pool").order_by("-pk"))[
            : limit + 1
        ]
    )
    more = len(page) > limit
    page = page[:limit]
    reasons = wait_reasons(page)
    return {
        "results": [_action_row(a, reasons.get(a.pk)) for a in page],
        "next": str(page[-1].pk) if more and page else None,
        "total": total,
    }


def output_tail(output: str, limit_bytes: int = OUTPUT_TAIL_BYTES) -> tuple[str, int, bool]:
    """The last ``limit_bytes`` of an output, its full size in bytes, and whether it was cut."""
    encoded = output.encode("utf-8", errors="replace")
    if len(encoded) <= limit_bytes:
        return output, len(encoded), False
    tail = encoded[-limit_bytes:].decode("utf-8", errors="ignore")
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    return tail, len(encoded), True


def action_detail(action: Action) -> dict[str, Any]:
    tail, size, truncated = output_tail(action.output or "")
    reason = None
    if action.status == ActionStatus.QUEUED:
        positioned = _with_queue_position(Action.objects.filter(pk=action.pk)).get()
        reason = wait_reasons([positioned]).get(action.pk)
    tool = action.tool.name if action.tool else action.service.name if action.service else None
    return {
        "id": action.pk,
        "job": action.job_id,
        "pool": action.pool.name if action.pool else None,
        "status": action.status,
        "tool": tool,
        "demand": action.demand,
        "allocation": action.allocation,
        "cores": allocation_units(action.allocation, "cpu"),
        "node": {"id": action.node.pk, "name": action.node.name} if action.node else None,
        "timeline": {
            "submitted_at": action.submitted_at.isoformat(),
            "scheduled_at": action.scheduled_at.isoformat() if action.scheduled_at else None,
            "started_at": action.started_at.isoformat() if action.started_at else None,
            "finished_at": action.finished_at.isoformat() if action.finished_at else None,
        },
        "wait_reason": reason,
        "output_tail": tail,
        "output_bytes": size,
        "output_truncated": truncated,
        "exit_code": action.exit_code,
        "error": action.error_reason,
        "can_cancel": action.status in ACTIVE_STATUSES,
    }


def pool_policy(pool: ResourcePool) -> Policy | None:
    return Policy.objects.filter(pool=pool, kind=PolicyKind.ACTION_SCHEDULER).order_by("pk").first()


def _version_json(version: Any, diff: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": version.version,
        "author": version.author.get_username() if version.author else None,
        "created_at": version.created_at.isoformat(),
        "settings": version.settings,
        "diff": diff,
    }


def diff_rows(stored: Any) -> list[dict[str, Any]]:
    """The policies app stores ``{"added", "removed", "changed": {k: [old, new]}}``; flatten it."""
    if isinstance(stored, list):
        return stored
    if not isinstance(stored, dict):
        return []
    rows = [
        {"field": key, "old": pair[0], "new": pair[1]}
        for key, pair in (stored.get("changed") or {}).items()
    ]
    rows += [{"field": k, "old": None, "new": v} for k, v in (stored.get("added") or {}).items()]
    rows += [{"field": k, "old": v, "new": None} for k, v in (stored.get("removed") or {}).items()]
    return sorted(rows, key=lambda row: row["field"])


def pool_policies(pool: ResourcePool, applied_version: int | None = None) -> dict[str, Any]:
    policy = pool_policy(pool)
    versions = (
        list(policy.versions.select_related("author").order_by("-version")[:50]) if policy else []
    )
    current: dict[str, Any] | None = None
    defaults = policy_defaults(pool)
    if policy is not None:
        current = {
            "version": policy.version,
            "author": policy.updated_by.get_username() if policy.updated_by else None,
            "created_at": policy.updated_at.isoformat(),
            "settings": {**defaults, **(policy.settings or {})},
            "diff": [],
        }
    return {
        "pool": pool.name,
        "current": current,
        "applied_version": applied_version,
        "versions": [_version_json(v, diff_rows(v.diff)) for v in versions],
        "defaults": defaults,
    }


def policies_overview() -> dict[str, Any]:
    return {
        "fields": [field.as_json() for field in POLICY_FIELDS],
        "pools": [pool_policies(pool) for pool in ResourcePool.objects.all()],
    }
