"""Reads behind the Rollouts page (issue 18): the LLM workers as the trajectories placed on them
show them, trajectories with predicted remaining length, priority and worker, migrations, and
DARTS groups (heddle §4–§5, darts §4).

The ``Trajectory`` rows are the system of record: the router's state stream is persisted to them
(``apps.trajectories.router_state``) — status, steps, tokens, predicted remaining tokens, worker
and timings. Priority and migrations are in the router's stream entries but not in the rows:
where Redis is configured they are read from the newest entries of that stream (a bounded
``XREVRANGE``, the consumer group untouched); elsewhere they are null. KV-cache use and each
worker's own queue are not reported by the router to the control plane at all: ``missing``
names them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import redis
from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from apps.jobs.models import Job
from apps.trajectories.models import TERMINAL_TRAJECTORY_STATUSES, Trajectory, TrajectoryStatus
from controlplane.redis_client import configured_redis, key_prefix
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.dashboard")

TRAJECTORY_LIMIT = 200
GROUP_LIMIT = 50
STATE_SCAN = 5000  # most router state entries read for priority and migrations
STATE_PAGE = 500
ACTIVE = "active"
STATUS_FILTERS = frozenset({ACTIVE, *TrajectoryStatus.values})

MISSING = [
    "KV-cache use and each LLM worker's own request queue: the router does not report worker "
    "metrics to the control plane (the workers' load shown is counted from the trajectories "
    "placed on each)",
]


def _active(trajectories: QuerySet[Trajectory]) -> QuerySet[Trajectory]:
    return trajectories.exclude(status__in=TERMINAL_TRAJECTORY_STATUSES)


def router_live_fields(trajectory_ids: Iterable[int]) -> dict[int, dict[str, int]] | None:
    """Priority and migrations of these trajectories from the newest router state entries, read
    newest first a page at a time until each is found or ``STATE_SCAN`` entries were read; None
    when no Redis is configured or it cannot be read (the page then says "not reported")."""
    wanted = {str(pk) for pk in trajectory_ids}
    client = configured_redis()
    if client is None or not wanted:
        return None if client is None else {}
    stream = RegistryNames(key_prefix()).trajectory_state
    found: dict[int, dict[str, int]] = {}
    newest_unread, scanned = "+", 0
    try:
        while scanned < STATE_SCAN and len(found) < len(wanted):
            entries: Any = client.xrevrange(stream, max=newest_unread, count=STATE_PAGE)
            for _, fields in entries:
                _take_state(fields, wanted, found)
            scanned += len(entries)
            if len(entries) < STATE_PAGE:
                break
            last_id = entries[-1][0]
            newest_unread = "(" + (last_id.decode() if isinstance(last_id, bytes) else last_id)
    except redis.RedisError as error:
        log.warning("rollouts: router state stream not readable: %s", error)
        return None
    return found


def _take_state(fields: Any, wanted: set[str], found: dict[int, dict[str, int]]) -> None:
    """Keep one entry's priority and migrations if it is the newest for a wanted trajectory."""
    try:
        state = json.loads(fields[b"state"])
        trajectory = str(state["trajectory"])
    except (KeyError, TypeError, ValueError):
        return
    if trajectory in wanted and int(trajectory) not in found:
        priority, migrations = state.get("priority"), state.get("migrations")
        found[int(trajectory)] = {
            "priority": priority if isinstance(priority, int) else 0,
            "migrations": migrations if isinstance(migrations, int) else 0,
        }


def _trajectory_row(row: Trajectory, live: dict[int, dict[str, int]] | None) -> dict[str, Any]:
    fields = (live or {}).get(row.pk, {})
    return {
        "id": row.pk,
        "job": row.job_id,
        "training_step": row.training_step,
        "group": row.group_id,
        "sample": row.sample_index,
        "status": row.status,
        "steps": row.steps,
        "tokens": row.tokens,
        "predicted_remaining_tokens": row.predicted_remaining_tokens,
        "worker": row.llm_worker or None,
        "priority": fields.get("priority"),
        "migrations": fields.get("migrations"),
        "queueing_s": row.queueing_s,
        "generation_s": row.generation_s,
        "tool_s": row.tool_s,
        "total_s": row.total_s,
    }


def worker_rows(trajectories: QuerySet[Trajectory]) -> list[dict[str, Any]]:
    """Per LLM worker: the trajectories placed on it that have not ended, by status, their tokens
    and predicted remaining tokens (Heddle's load: the work still to come, §5.1)."""
    rows = (
        _active(trajectories)
        .exclude(llm_worker="")
        .values("llm_worker")
        .annotate(
            trajectories=Count("id"),
            generating=Count("id", filter=Q(status=TrajectoryStatus.GENERATING)),
            tool_call=Count("id", filter=Q(status=TrajectoryStatus.TOOL_CALL)),
            pending=Count("id", filter=Q(status=TrajectoryStatus.PENDING)),
            tokens=Sum("tokens"),
            predicted_remaining=Sum("predicted_remaining_tokens"),
        )
        .order_by("llm_worker")
    )
    return [
        {
            "name": row["llm_worker"],
            "trajectories": row["trajectories"],
            "generating": row["generating"],
            "tool_call": row["tool_call"],
            "pending": row["pending"],
            "tokens": int(row["tokens"] or 0),
            "predicted_remaining_tokens": int(row["predicted_remaining"] or 0),
        }
        for row in rows
    ]


def group_rows(trajectories: QuerySet[Trajectory]) -> list[dict[str, Any]]:
    """DARTS groups of the newest training steps: samples drawn, running, kept (finished) and
    pruned (aborted) per prompt group (darts §4, tail pruning)."""
    rows = (
        trajectories.exclude(group_id="")
        .values("job_id", "training_step", "group_id")
        .annotate(
            samples=Count("id"),
            finished=Count("id", filter=Q(status=TrajectoryStatus.FINISHED)),
            aborted=Count("id", filter=Q(status=TrajectoryStatus.ABORTED)),
            failed=Count("id", filter=Q(status=TrajectoryStatus.FAILED)),
        )
        .order_by("-training_step", "-job_id", "group_id")[:GROUP_LIMIT]
    )
    return [
        {
            "job": row["job_id"],
            "training_step": row["training_step"],
            "group": row["group_id"],
            "samples": row["samples"],
            "finished": row["finished"],
            "pruned": row["aborted"],
            "failed": row["failed"],
            "running": row["samples"] - row["finished"] - row["aborted"] - row["failed"],
        }
        for row in rows
    ]


def rollouts(
    *,
    job: Job | None = None,
    status: str = ACTIVE,
    limit: int = TRAJECTORY_LIMIT,
    now: datetime | None = None,
) -> dict[str, Any]:
    """The Rollouts page: workers, trajectories (longest predicted remaining first) and groups."""
    now = now or timezone.now()
    scope = Trajectory.objects.all() if job is None else Trajectory.objects.filter(job=job)
    listed = _active(scope) if status == ACTIVE else scope.filter(status=status)
    ordered = (
        listed.order_by(F("predicted_remaining_tokens").desc(nulls_last=True), "-tokens", "id")
        if status == ACTIVE
        else listed.order_by("-id")
    )
    page = list(ordered[:limit])
    live = router_live_fields(row.pk for row in page)
    counts = {row["status"]: row["n"] for row in scope.values("status").annotate(n=Count("id"))}
    return {
        "t": now.timestamp(),
        "job": job.pk if job else None,
        "status": status,
        "counts": {value: counts.get(value, 0) for value in TrajectoryStatus.values},
        "unplaced": _active(scope).filter(llm_worker="").count(),
        "workers": worker_rows(scope),
        "trajectories": [_trajectory_row(row, live) for row in page],
        "router_fields": live is not None,
        "groups": group_rows(scope),
        "missing": MISSING,
    }
