"""Reads of buffer definitions, scoped to what the caller sees (a job key: its own job's), and
their plain-data form (the shape ``Workflow.to_json`` writes, plus what only the web keeps)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.shortcuts import get_object_or_404

from apps.buffers.models import Buffer, BufferSnapshot, Trigger
from apps.jobs.access import Principal, job_ids_filter


def buffer_list(*, principal: Principal, job_id: int | None = None) -> QuerySet[Buffer]:
    triggers = Prefetch("triggers", queryset=Trigger.objects.order_by("id"))  # declared order
    buffers = Buffer.objects.filter(**job_ids_filter(principal)).prefetch_related(triggers)
    if job_id is not None:
        buffers = buffers.filter(job_id=job_id)
    return buffers.order_by("id")


def buffer_get(*, principal: Principal, buffer_id: int) -> Buffer:
    """The buffer, or 404 (also when it belongs to a job the caller does not see)."""
    return get_object_or_404(buffer_list(principal=principal), pk=buffer_id)


def trigger_definition(trigger: Trigger) -> dict[str, Any]:
    return {
        "buffer": trigger.buffer.name,
        "name": trigger.name,
        "kind": trigger.kind,
        "params": trigger.params,
        "target": trigger.target,
        "enabled": trigger.enabled,
    }


def buffer_definition(buffer: Buffer) -> dict[str, Any]:
    """A buffer as ``Workflow.to_json`` lists it, plus sampler and synchronisation mode."""
    return {
        "name": buffer.name,
        "schema": buffer.schema,
        "capacity": buffer.capacity,
        "eviction": buffer.eviction,
        "prioritised": buffer.prioritised,
        "sampler": buffer.sampler,
        "sync_mode": buffer.sync_mode,
    }


def workflow_definition(*, buffers: QuerySet[Buffer]) -> dict[str, Any]:
    """A job's buffers and triggers in ``Workflow.to_json``'s shape (the round trip's way back)."""
    rows = list(buffers)
    return {
        "buffers": [buffer_definition(buffer) for buffer in rows],
        "triggers": [
            trigger_definition(trigger) for buffer in rows for trigger in buffer.triggers.all()
        ],
    }


def buffer_history(
    *, buffer: Buffer, since: dt.datetime | None = None, limit: int = 100
) -> list[BufferSnapshot]:
    """The buffer's latest snapshots, newest first (taken after ``since`` when given)."""
    snapshots = BufferSnapshot.objects.filter(buffer=buffer)
    if since is not None:
        snapshots = snapshots.filter(taken_at__gt=since)
    rows = list(snapshots.order_by("-taken_at")[:limit])
    for row in rows:
        row.buffer = buffer  # fill divides by its capacity: no query per row
    return rows
