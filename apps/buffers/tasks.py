"""Celery beat tasks (scheduled in ``CELERY_BEAT_SCHEDULE``): each buffer's stats from the
buffer service kept as snapshots, and their retention (``LOOM_BUFFER_SNAPSHOT_RETENTION_H``
hours); the buffer service's Redis copy of the definitions rebuilt from the database
(``apps.buffers.registry``)."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from apps.buffers.registry import buffer_definitions_sync
from apps.buffers.services import buffer_snapshots_prune, buffer_snapshots_record

DEFAULT_RETENTION_H = 24


@shared_task(name="buffers.snapshot", ignore_result=True)
def buffers_snapshot() -> int:
    """One round of snapshots; returns how many were written."""
    return buffer_snapshots_record(now=timezone.now())


@shared_task(name="buffers.prune", ignore_result=True)
def buffers_prune() -> int:
    hours = int(getattr(settings, "LOOM_BUFFER_SNAPSHOT_RETENTION_H", DEFAULT_RETENTION_H))
    return buffer_snapshots_prune(older_than=timezone.now() - timedelta(hours=hours))


@shared_task(name="buffers.sync", ignore_result=True)
def buffers_sync() -> int:
    """Repair the definitions hash (a Redis write that failed, a restarted Redis)."""
    return buffer_definitions_sync()
