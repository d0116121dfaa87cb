"""Reads behind the buffer pages: each buffer's definition, triggers, fill level and trigger
firings over time (artos §4.1–§4.2), and the elastic actors its workflows run (§4.3).

The experience data lives in the buffer service, never in the database; what the control plane
keeps is the definition, the ``BufferSnapshot`` rows the beat task records from the service's
stats, and each workflow actor's latest report (``BufferActorState``: state, invocations,
restored vs cold starts, start-up waits) that the same task copies.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery
from django.utils import timezone

from apps.buffers.models import Buffer, BufferActorState, BufferSnapshot, Trigger
from apps.jobs.models import Job

HISTORY_LIMIT = 300
LIST_LIMIT = 500
ACTOR_LIMIT = 500  # actors shown per buffer, the most recently reported first


def snapshot_json(snapshot: BufferSnapshot, capacity: int) -> dict[str, Any]:
    return {
        "t": snapshot.taken_at.timestamp(),
        "taken_at": snapshot.taken_at.isoformat(),
        "held": snapshot.held,
        "fill": snapshot.held / capacity if capacity else 0.0,
        "complete": snapshot.complete,
        "actors": snapshot.actors,
        "steps_written": snapshot.steps_written,
        "steps_dropped": snapshot.steps_dropped,
        "steps_evicted": snapshot.steps_evicted,
        "samples": snapshot.samples,
        "firings": snapshot.firings if isinstance(snapshot.firings, dict) else {},
    }


def _summary(buffer: Buffer, latest: BufferSnapshot | None) -> dict[str, Any]:
    return {
        "id": buffer.pk,
        "name": buffer.name,
        "job": {"id": buffer.job_id, "name": buffer.job.name},
        "capacity": buffer.capacity,
        "eviction": buffer.eviction,
        "sampler": buffer.sampler,
        "sync_mode": buffer.sync_mode,
        "latest": snapshot_json(latest, buffer.capacity) if latest else None,
    }


def buffers_overview(job: Job | None = None) -> dict[str, Any]:
    """Every buffer (of ``job`` when given) with its latest snapshot: three queries in all."""
    latest_id = (
        BufferSnapshot.objects.filter(buffer=OuterRef("pk")).order_by("-taken_at").values("pk")[:1]
    )
    buffers = Buffer.objects.select_related("job").annotate(latest_id=Subquery(latest_id))
    if job is not None:
        buffers = buffers.filter(job=job)
    rows = list(buffers.order_by("job_id", "name")[:LIST_LIMIT])
    ids = [row.latest_id for row in rows if getattr(row, "latest_id", None)]
    latest = {s.pk: s for s in BufferSnapshot.objects.filter(pk__in=ids)}
    return {
        "buffers": [_summary(b, latest.get(getattr(b, "latest_id", None) or 0)) for b in rows],
    }


def actor_json(row: BufferActorState) -> dict[str, Any]:
    return {
        "workflow": row.workflow,
        "actor": row.actor,
        "state": row.state,
        "invocations": row.invocations,
        "restored": row.restored,
        "cold": row.cold,
        "last_startup_wait_s": row.last_startup_wait_s,
        "last_restore_s": row.last_restore_s,
        "startup_wait_p50_s": row.startup_wait_p50_s,
        "startup_wait_p99_s": row.startup_wait_p99_s,
        "reported_at": row.reported_at.isoformat(),
    }


def _trigger_json(trigger: Trigger, firings: dict[str, Any]) -> dict[str, Any]:
    count = firings.get(trigger.name)
    return {
        "name": trigger.name,
        "kind": trigger.kind,
        "params": trigger.params,
        "target": trigger.target,
        "enabled": trigger.enabled,
        "firings": int(count) if isinstance(count, int) else None,
    }


def buffer_detail(
    buffer: Buffer, *, limit: int = HISTORY_LIMIT, now: datetime | None = None
) -> dict[str, Any]:
    """One buffer: definition, triggers with their firings, its workflows' actors, and its
    recorded history (oldest first, at most ``limit`` snapshots): four queries, however many
    snapshots, triggers or actors."""
    now = now or timezone.now()
    snapshots = list(BufferSnapshot.objects.filter(buffer=buffer).order_by("-taken_at")[:limit])
    snapshots.reverse()
    history = [snapshot_json(s, buffer.capacity) for s in snapshots]
    latest = history[-1] if history else None
    firings = latest["firings"] if latest else {}
    triggers = list(Trigger.objects.filter(buffer=buffer).order_by("id"))
    recent = BufferActorState.objects.filter(buffer=buffer).order_by("-reported_at", "id")
    actors = sorted(recent[:ACTOR_LIMIT], key=lambda row: (row.workflow, row.actor))
    return {
        "t": now.timestamp(),
        "buffer": {
            **_summary(buffer, snapshots[-1] if snapshots else None),
            "schema": buffer.schema,
            "config": buffer.config,
        },
        "triggers": [_trigger_json(t, firings) for t in triggers],
        "actors": [actor_json(row) for row in actors],
        "history": history,
        "snapshot_age_s": (now.timestamp() - latest["t"]) if latest else None,
        "missing": [],
    }
