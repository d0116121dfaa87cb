"""What pools and jobs are doing now, read from the database: queues, ACT, capacity held.

One set of bounded reads for everyone who reports it: the rollups (``services.rollup_write``), the
Prometheus collector (``prometheus``) and the dashboard (its pages' first paint and its live
snapshots, ``apps.dashboard.live.snapshots``). The scheduler publishes the same pool snapshot from
its in-memory state (arl-tangram §5: it owns the queue). Every query here is bounded: counts and
aggregates use the (pool, status, submitted_at) and (job, status, submitted_at) indexes, and ACT
percentiles read at most ``ACT_SAMPLE_LIMIT`` rows.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, QuerySet, Sum
from django.utils import timezone

from apps.actions.models import (
    ALLOCATED_STATUSES,
    TERMINAL_STATUSES,
    Action,
    ActionStatus,
)
from apps.jobs.models import Job
from apps.metrics.stats import ActStats, act_stats, ratio, seconds_between
from apps.policies.models import Policy, PolicyKind
from apps.resources.models import ApiQuota, Node, NodeStatus, PoolKind, ResourcePool
from apps.trajectories.models import TERMINAL_TRAJECTORY_STATUSES, Trajectory

ACT_WINDOW_S = 60.0
ACT_SAMPLE_LIMIT = 2000


def allocation_units(allocation: Any, resource: str) -> list[int]:
    """Core or GPU ids held by one allocation (``{"cores": [0, 1], "gpus": [3]}``)."""
    if not isinstance(allocation, dict):
        return []
    ids = allocation.get("cores" if resource == "cpu" else "gpus")
    if isinstance(ids, list):
        return [int(i) for i in ids if isinstance(i, int | float)]
    return []


def held_count(allocation: Any, resource: str) -> int:
    ids = allocation_units(allocation, resource)
    if ids:
        return len(ids)
    if isinstance(allocation, dict) and allocation.get("resource", "cpu") == resource:
        units = allocation.get("units")
        return int(units) if isinstance(units, int | float) else 0
    return 0


COMPLETED_STATUSES = tuple(s for s in TERMINAL_STATUSES if s != ActionStatus.CANCELLED)


def recent_completions(
    actions: QuerySet[Action], *, start: datetime, end: datetime, limit: int
) -> list[float]:
    """ACTs of the newest completed actions that finished in ``[start, end)``.

    Per completed status, the newest ``limit`` submissions are read backwards along the
    (pool|job, status, submitted_at) index, with ACT computed by the database. The cost stays
    bounded by ``limit`` however large the table grows (``finished_at`` has no index); an action
    that ran longer than ``limit`` later submissions took misses its bucket, which only matters for
    the oldest stragglers of a very busy pool.
    """
    act = ExpressionWrapper(F("finished_at") - F("submitted_at"), output_field=DurationField())
    durations: list[float] = []
    for status in COMPLETED_STATUSES:
        rows = (
            actions.filter(status=status)
            .order_by("-submitted_at")
            .annotate(act=act)
            .values_list("finished_at", "act")[:limit]
        )
        durations += [
            duration.total_seconds()
            for finished, duration in rows
            if finished is not None and duration is not None and start <= finished < end
        ]
    return durations


def _completion_stats_in_database(
    actions: QuerySet[Action], *, start: datetime, end: datetime, limit: int
) -> ActStats:
    """PostgreSQL: the same rows as :func:`recent_completions`, percentiles computed in SQL.

    Shipping thousands of timestamps to Python every second is most of a snapshot's cost; here
    only four numbers come back.
    """
    parts, params = [], []
    for status in COMPLETED_STATUSES:
        recent = (
            actions.filter(status=status)
            .order_by("-submitted_at")
            .values("finished_at", "submitted_at")[:limit]
        )
        sql, part_params = recent.query.sql_with_params()
        parts.append(f"({sql})")
        params += list(part_params)
    query = (
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY act), "
        "percentile_cont(0.99) WITHIN GROUP (ORDER BY act), avg(act), count(*) "
        "FROM (SELECT EXTRACT(EPOCH FROM finished_at - submitted_at)::float8 AS act "
        f"FROM ({' UNION ALL '.join(parts)}) AS recent(finished_at, submitted_at) "
        "WHERE finished_at >= %s AND finished_at < %s) AS acts"
    )
    with connections[actions.db].cursor() as cursor:
        cursor.execute(query, [*params, start, end])
        p50, p99, mean, count = cursor.fetchone()
    if not count:
        return {"p50": None, "p99": None, "mean": None, "n": 0}
    return {"p50": float(p50), "p99": float(p99), "mean": float(mean), "n": int(count)}


def completion_stats(
    actions: QuerySet[Action], *, start: datetime, end: datetime, limit: int
) -> ActStats:
    """ACT p50 / p99 / mean of the completions :func:`recent_completions` selects."""
    if connections[actions.db].vendor == "postgresql":
        return _completion_stats_in_database(actions, start=start, end=end, limit=limit)
    return act_stats(recent_completions(actions, start=start, end=end, limit=limit))


def recent_act(actions: QuerySet[Action], now: datetime) -> ActStats:
    """ACT stats of the actions (a queryset) that finished in the last ``ACT_WINDOW_S``."""
    since = now - timedelta(seconds=ACT_WINDOW_S)
    return completion_stats(
        actions, start=since, end=now + timedelta(seconds=1), limit=ACT_SAMPLE_LIMIT
    )


def active_counts(actions: QuerySet[Action]) -> dict[str, Any]:
    """Waiting and running counts and the oldest queued submission.

    Three index range scans on (pool|job, status, submitted_at): their cost follows the number of
    *active* actions, not the size of the table.
    """
    queued = actions.filter(status=ActionStatus.QUEUED)
    return {
        "waiting": queued.count(),
        "running": actions.filter(status__in=ALLOCATED_STATUSES).count(),
        "oldest": queued.aggregate(oldest=Min("submitted_at"))["oldest"],
    }


def pool_capacity(pool: ResourcePool) -> dict[str, Any]:
    """Totals of the pool's usable (online) nodes and of what allocated actions hold."""
    online = Node.objects.filter(pool=pool, status=NodeStatus.ONLINE)
    totals = online.aggregate(cores=Sum("cores"), gpus=Sum("gpus"), nodes=Count("id"))
    held_cores = held_gpus = 0
    for allocation in Action.objects.filter(pool=pool, status__in=ALLOCATED_STATUSES).values_list(
        "allocation", flat=True
    ):
        held_cores += held_count(allocation, "cpu")
        held_gpus += held_count(allocation, "gpu")
    quota_limit = 0
    if pool.kind == PoolKind.API:
        quotas = ApiQuota.objects.filter(pool=pool).aggregate(total=Sum("concurrency_limit"))
        quota_limit = int(quotas["total"] or 0)
    return {
        "online_nodes": int(totals["nodes"] or 0),
        "cores_total": int(totals["cores"] or 0),
        "gpus_total": int(totals["gpus"] or 0),
        "cores_held": held_cores,
        "gpus_held": held_gpus,
        "quota_limit": quota_limit,
    }


def pool_policy_version(pool: ResourcePool) -> int | None:
    """Version of the pool's action-scheduler policy as stored (the scheduler reports its own)."""
    return (
        Policy.objects.filter(pool=pool, kind=PolicyKind.ACTION_SCHEDULER)
        .values_list("version", flat=True)
        .first()
    )


def pool_snapshot(pool: ResourcePool, now: datetime | None = None) -> dict[str, Any]:
    """The compact pool snapshot published on ``pool:<name>``."""
    now = now or timezone.now()
    actions = Action.objects.filter(pool=pool)
    counts = active_counts(actions)
    capacity = pool_capacity(pool)
    running = int(counts["running"] or 0)
    return {
        "t": now.timestamp(),
        "pool": pool.name,
        "kind": pool.kind,
        "waiting": int(counts["waiting"] or 0),
        "running": running,
        "oldest_wait_s": seconds_between(counts["oldest"], now),
        "act": recent_act(actions, now),
        "util": {
            "cpu": ratio(capacity["cores_held"], capacity["cores_total"]),
            "gpu": ratio(capacity["gpus_held"], capacity["gpus_total"]),
            "quota": ratio(running, capacity["quota_limit"]) if pool.kind == PoolKind.API else None,
        },
        # What is saved; ``policy_version`` (what runs) comes from the scheduler's own snapshots.
        "stored_policy_version": pool_policy_version(pool),
    }


def job_counts(job: Job) -> dict[str, int]:
    """Actions of a job per status (one GROUP BY)."""
    counts = {status.value: 0 for status in ActionStatus}
    for row in Action.objects.filter(job=job).values("status").annotate(n=Count("id")):
        counts[row["status"]] = row["n"]
    return counts


def active_trajectories(job: Job) -> int:
    """Trajectories of the job that have not ended."""
    return (
        Trajectory.objects.filter(job=job).exclude(status__in=TERMINAL_TRAJECTORY_STATUSES).count()
    )
