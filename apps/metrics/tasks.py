"""Celery beat tasks: rollups every ``LOOM_ROLLUP_BUCKET_S`` seconds and their retention."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.metrics.services import DEFAULT_BUCKET_S, rollup_prune, rollup_write

DEFAULT_RETENTION_DAYS = 14


@shared_task(name="metrics.rollup", ignore_result=True)
def metrics_rollup() -> int:
    """Write this bucket's pool and job rollups; returns the number of rows written."""
    bucket_s = int(getattr(settings, "LOOM_ROLLUP_BUCKET_S", DEFAULT_BUCKET_S))
    result = rollup_write(now=timezone.now(), bucket_s=bucket_s)
    return result.pools + result.jobs


@shared_task(name="metrics.prune", ignore_result=True)
def metrics_prune() -> int:
    """Drop rollups past the retention period."""
    days = int(getattr(settings, "LOOM_ROLLUP_RETENTION_DAYS", DEFAULT_RETENTION_DAYS))
    return rollup_prune(older_than=timezone.now() - timedelta(days=days))
