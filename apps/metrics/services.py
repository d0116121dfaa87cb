"""Writes for metrics: the periodic rollup of pools and jobs, and its retention.

Called by the Celery beat tasks in tasks.py. ``rollup_write`` is idempotent per bucket
(update_or_create on the unique (pool|job, bucket_start)), so a beat that fires twice or a retried
task never doubles a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import QuerySet
from django.utils import timezone

from apps.actions.models import ACTIVE_STATUSES, Action
from apps.jobs.models import Job
from apps.metrics.measures import (
    active_counts,
    active_trajectories,
    completion_stats,
    pool_capacity,
)
from apps.metrics.models import JobRollup, PoolRollup
from apps.metrics.stats import ratio, seconds_between
from apps.resources.models import PoolKind, ResourcePool

DEFAULT_BUCKET_S = 10
# ACT percentiles of one bucket read at most this many of its most recent completions.
BUCKET_SAMPLE_LIMIT = 10_000


@dataclass(frozen=True)
class RollupResult:
    bucket_start: datetime
    pools: int
    jobs: int


def bucket_floor(now: datetime, bucket_s: int) -> datetime:
    """Start of the ``bucket_s``-second bucket containing ``now``."""
    epoch = now.timestamp()
    return datetime.fromtimestamp(epoch - epoch % bucket_s, tz=now.tzinfo)


def _bucket_fields(
    actions: QuerySet[Action], *, start: datetime, end: datetime
) -> dict[str, object]:
    counts = active_counts(actions)
    stats = completion_stats(actions, start=start, end=end, limit=BUCKET_SAMPLE_LIMIT)
    return {
        "waiting": int(counts["waiting"] or 0),
        "running": int(counts["running"] or 0),
        "oldest_wait_s": seconds_between(counts["oldest"], end),
        "completed": stats["n"],
        "act_p50_s": stats["p50"],
        "act_p99_s": stats["p99"],
        "act_mean_s": stats["mean"],
    }


def rollup_write(*, now: datetime | None = None, bucket_s: int = DEFAULT_BUCKET_S) -> RollupResult:
    """Write one rollup row per pool and per job with activity, for the bucket ending at ``now``."""
    now = now or timezone.now()
    bucket_start = bucket_floor(now, bucket_s)
    window_start = now - timedelta(seconds=bucket_s)
    pools = list(ResourcePool.objects.all())
    for pool in pools:
        fields = _bucket_fields(Action.objects.filter(pool=pool), start=window_start, end=now)
        capacity = pool_capacity(pool)
        running = int(fields["running"])  # type: ignore[call-overload]
        fields["util_cpu"] = ratio(capacity["cores_held"], capacity["cores_total"])
        fields["util_gpu"] = ratio(capacity["gpus_held"], capacity["gpus_total"])
        fields["util_quota"] = (
            ratio(running, capacity["quota_limit"]) if pool.kind == PoolKind.API else None
        )
        PoolRollup.objects.update_or_create(
            pool=pool, bucket_start=bucket_start, defaults={"bucket_s": bucket_s, **fields}
        )
    newest = Action.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    active_job_ids = Action.objects.filter(pool__in=pools, status__in=ACTIVE_STATUSES).values_list(
        "job_id", flat=True
    )
    finished_job_ids = Action.objects.filter(
        pk__gt=newest - BUCKET_SAMPLE_LIMIT, finished_at__gte=window_start
    ).values_list("job_id", flat=True)
    job_ids = set(active_job_ids.distinct()) | set(finished_job_ids.distinct())
    jobs = list(Job.objects.filter(pk__in=job_ids))
    for job in jobs:
        fields = _bucket_fields(Action.objects.filter(job=job), start=window_start, end=now)
        fields["active_trajectories"] = active_trajectories(job)
        JobRollup.objects.update_or_create(
            job=job, bucket_start=bucket_start, defaults={"bucket_s": bucket_s, **fields}
        )
    return RollupResult(bucket_start=bucket_start, pools=len(pools), jobs=len(jobs))


def rollup_prune(*, older_than: datetime) -> int:
    """Delete rollups older than ``older_than``; returns how many rows went."""
    pool_deleted, _ = PoolRollup.objects.filter(bucket_start__lt=older_than).delete()
    job_deleted, _ = JobRollup.objects.filter(bucket_start__lt=older_than).delete()
    return pool_deleted + job_deleted
