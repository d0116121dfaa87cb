"""Rollups: per-pool and per-job history (queue, running, ACT p50/p99/mean, utilisation).

One row per (pool or job, bucket) written by the Celery beat task ``metrics.rollup``; the charts'
history comes from here, so it survives restarts of the web and scheduler processes.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from apps.jobs.models import Job
from apps.resources.models import ResourcePool


class RollupFields(models.Model):
    """Columns shared by pool and job rollups."""

    bucket_start = models.DateTimeField(help_text="start of the bucket (UTC)")
    bucket_s = models.PositiveIntegerField(help_text="bucket length in seconds")
    waiting = models.PositiveIntegerField(help_text="queued actions at the end of the bucket")
    running = models.PositiveIntegerField(help_text="scheduled or running actions")
    oldest_wait_s = models.FloatField(null=True, blank=True)
    completed = models.PositiveIntegerField(default=0, help_text="actions finished in the bucket")
    act_p50_s = models.FloatField(null=True, blank=True)
    act_p99_s = models.FloatField(null=True, blank=True)
    act_mean_s = models.FloatField(null=True, blank=True)
    util_cpu = models.FloatField(null=True, blank=True)
    util_gpu = models.FloatField(null=True, blank=True)
    util_quota = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


def _checks(prefix: str) -> list[models.BaseConstraint]:
    in_unit = Q(util_cpu__isnull=True) | Q(util_cpu__gte=0, util_cpu__lte=1)
    gpu_in_unit = Q(util_gpu__isnull=True) | Q(util_gpu__gte=0, util_gpu__lte=1)
    quota_in_unit = Q(util_quota__isnull=True) | Q(util_quota__gte=0, util_quota__lte=1)
    ordered = Q(act_p50_s__isnull=True) | Q(act_p99_s__gte=models.F("act_p50_s"))
    return [
        models.CheckConstraint(name=f"{prefix}_util_in_unit", condition=in_unit & gpu_in_unit),
        models.CheckConstraint(name=f"{prefix}_quota_in_unit", condition=quota_in_unit),
        models.CheckConstraint(name=f"{prefix}_p99_ge_p50", condition=ordered),
        models.CheckConstraint(name=f"{prefix}_bucket_positive", condition=Q(bucket_s__gte=1)),
    ]


class PoolRollup(RollupFields):
    pool = models.ForeignKey(ResourcePool, on_delete=models.CASCADE, related_name="rollups")

    class Meta:
        ordering = ["pool", "bucket_start"]
        constraints = [
            models.UniqueConstraint(fields=["pool", "bucket_start"], name="poolrollup_unique"),
            *_checks("poolrollup"),
        ]

    def __str__(self) -> str:
        return f"{self.pool_id}@{self.bucket_start:%Y-%m-%d %H:%M:%S}"


class JobRollup(RollupFields):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="rollups")
    active_trajectories = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["job", "bucket_start"]
        constraints = [
            models.UniqueConstraint(fields=["job", "bucket_start"], name="jobrollup_unique"),
            *_checks("jobrollup"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id}@{self.bucket_start:%Y-%m-%d %H:%M:%S}"
