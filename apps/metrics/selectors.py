"""Reads of rollup history for the dashboard's charts."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from apps.jobs.models import Job
from apps.metrics.models import JobRollup, PoolRollup
from apps.resources.models import ResourcePool

DEFAULT_HISTORY_S = 3600
HISTORY_LIMIT = 720


def _point(row: PoolRollup | JobRollup) -> dict[str, Any]:
    point: dict[str, Any] = {
        "t": (row.bucket_start + timedelta(seconds=row.bucket_s)).timestamp(),
        "waiting": row.waiting,
        "running": row.running,
        "oldest_wait_s": row.oldest_wait_s,
        "act_p50": row.act_p50_s,
        "act_p99": row.act_p99_s,
        "act_mean": row.act_mean_s,
        "util_cpu": row.util_cpu,
        "util_gpu": row.util_gpu,
        "util_quota": row.util_quota,
    }
    if isinstance(row, JobRollup):
        point["active_trajectories"] = row.active_trajectories
    return point


def pool_history(
    *, pools: list[ResourcePool], since: datetime | None = None
) -> dict[str, list[dict[str, Any]]]:
    """The last hour (default) of rollups for each pool, oldest first, in one query."""
    since = since or timezone.now() - timedelta(seconds=DEFAULT_HISTORY_S)
    history: dict[str, list[dict[str, Any]]] = {pool.name: [] for pool in pools}
    names = {pool.pk: pool.name for pool in pools}
    rows = PoolRollup.objects.filter(pool__in=pools, bucket_start__gte=since).order_by(
        "-bucket_start"
    )[: HISTORY_LIMIT * max(1, len(pools))]
    for row in reversed(rows):
        history[names[row.pool_id]].append(_point(row))
    return history


def job_history(*, job: Job, since: datetime | None = None) -> list[dict[str, Any]]:
    """The last hour (default) of one job's rollups, oldest first."""
    since = since or timezone.now() - timedelta(seconds=DEFAULT_HISTORY_S)
    rows = JobRollup.objects.filter(job=job, bucket_start__gte=since).order_by("-bucket_start")[
        :HISTORY_LIMIT
    ]
    return [_point(row) for row in reversed(rows)]
