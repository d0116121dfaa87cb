"""The snapshot each live topic carries: a pool's, a node's card, a job's counts.

Pools come from ``apps.metrics.measures`` (the same numbers Prometheus and the rollups report);
nodes and jobs are shaped here. They serve a page's first paint, the refetch after a hidden tab
resumes, the database-backed loop (``watched_topics``) for topics no scheduler publishes, and the
broadcast that follows a committed change (``receivers``).
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from django.utils import timezone

from apps.actions.models import ACTIVE_STATUSES, ALLOCATED_STATUSES, Action
from apps.dashboard.live.groups import ALL_JOBS, Topic, TopicKind
from apps.jobs.models import Job
from apps.metrics.measures import (
    active_trajectories,
    allocation_units,
    held_count,
    job_counts,
    pool_snapshot,
    recent_act,
)
from apps.metrics.stats import seconds_between
from apps.resources.models import Node, NodeStatus, ResourcePool


def node_view(node: Node, now: datetime | None = None) -> dict[str, Any]:
    """Everything the node card shows: allocations by action, cached services, health."""
    now = now or timezone.now()
    allocations = []
    cores_used = gpus_used = 0
    for action_id, job_id, allocation in Action.objects.filter(
        node=node, status__in=ALLOCATED_STATUSES
    ).values_list("id", "job_id", "allocation"):
        cores, gpus = allocation_units(allocation, "cpu"), allocation_units(allocation, "gpu")
        cores_used += len(cores) or held_count(allocation, "cpu")
        gpus_used += len(gpus)
        allocations.append({"action": action_id, "job": job_id, "cores": cores, "gpus": gpus})
    usage = node.usage if isinstance(node.usage, dict) else {}
    services = usage.get("services", [])
    return {
        "t": now.timestamp(),
        "id": node.pk,
        "name": node.name,
        "pool": node.pool.name,
        "status": node.status,
        "draining": node.status == NodeStatus.DRAINING,
        "heartbeat_age_s": seconds_between(node.last_heartbeat_at, now),
        "cores_total": node.cores,
        "cores_used": cores_used,
        "gpus_total": node.gpus,
        "gpus_used": gpus_used,
        "allocations": allocations,
        "services": [
            {
                "gpu": s.get("gpu"),
                "name": str(s.get("name", "?")),
                "state": str(s.get("state", "?")),
            }
            for s in services
            if isinstance(s, dict)
        ],
    }


# Ended-action counts of a job grow with its history (a count over all its rows), so live
# snapshots refresh them at most this often; the active counts are exact on every snapshot.
TERMINAL_COUNTS_TTL_S = 10.0
_terminal_counts: dict[int, tuple[float, dict[str, int]]] = {}


def live_job_counts(job: Job) -> dict[str, int]:
    """Per-status counts for live snapshots: active ones exact, ended ones ≤ 10 s old."""
    moment = time.monotonic()
    cached = _terminal_counts.get(job.pk)
    if cached is None or moment - cached[0] > TERMINAL_COUNTS_TTL_S:
        counts = job_counts(job)
        _terminal_counts[job.pk] = (moment, counts)
        return counts
    actions = Action.objects.filter(job=job)
    active = {status.value: actions.filter(status=status).count() for status in ACTIVE_STATUSES}
    return {**cached[1], **active}


def job_snapshot(job: Job, now: datetime | None = None) -> dict[str, Any]:
    """The compact job snapshot published on ``job:<id>``."""
    now = now or timezone.now()
    return {
        "t": now.timestamp(),
        "job": job.pk,
        "counts": live_job_counts(job),
        "act": recent_act(Action.objects.filter(job=job), now),
        "active_trajectories": active_trajectories(job),
    }


def plane_snapshot(topic: Topic) -> dict[str, Any] | None:
    """The GPU map, buffer and Rollouts pages' topics carry what their REST endpoints answer."""
    from apps.buffers.models import Buffer
    from apps.dashboard import selectors_buffers, selectors_gpus, selectors_rollouts

    if topic.kind is TopicKind.GPUS:
        pools = selectors_gpus.gpu_pools(topic.key)
        return selectors_gpus.gpu_map(pools) if pools else None
    if topic.kind is TopicKind.BUFFER:
        buffer = Buffer.objects.select_related("job").filter(pk=topic.numeric_id).first()
        return selectors_buffers.buffer_detail(buffer) if buffer else None
    if topic.key == ALL_JOBS:
        return selectors_rollouts.rollouts()
    job = Job.objects.filter(pk=topic.numeric_id).first()
    return selectors_rollouts.rollouts(job=job) if job else None


def snapshot_for(topic: Topic) -> dict[str, Any] | None:
    """The current snapshot of one topic, or None when its object is gone."""
    if topic.kind in (TopicKind.GPUS, TopicKind.BUFFER, TopicKind.ROLLOUTS):
        return plane_snapshot(topic)
    if topic.kind is TopicKind.POOL:
        pool = ResourcePool.objects.filter(name=topic.key).first()
        return pool_snapshot(pool) if pool else None
    if topic.kind is TopicKind.NODE:
        node = Node.objects.select_related("pool").filter(pk=topic.numeric_id).first()
        return node_view(node) if node else None
    job = Job.objects.filter(pk=topic.numeric_id).first()
    return job_snapshot(job) if job else None


def snapshots_collect(topics: list[Topic]) -> list[tuple[str, dict[str, Any]]]:
    """Snapshots of ``topics`` (one synchronous database pass)."""
    collected = []
    for topic in topics:
        snapshot = snapshot_for(topic)
        if snapshot is not None:
            collected.append((str(topic), snapshot))
    return collected
