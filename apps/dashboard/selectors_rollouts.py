"""Reads behind the Rollouts page (issue 18): the LLM workers as the trajectories placed on them
show them, trajectories with predicted remaining length, priority and worker, migrations, and
DARTS groups (heddle §4–§5, darts §4).

The ``Trajectory`` rows are the system of record: the router's state stream is persisted to them
(``apps.trajectories.router_state``) — status, steps, tokens, predicted remaining tokens, worker
and timings. Priority, migrations and the candidates of router-side DARTS group rollouts are only
in the stream: where Redis is configured they are read from its newest entries
(``router_stream``); elsewhere they are null. Each worker's own load — the engine's running and
queued requests and KV-cache use, read by the router from the engine's metrics — comes from the
newest ``LLMWorkerReport`` rows (``apps.trajectories.router_control``); a worker with no report
in the last ``REPORT_FRESH_S`` shows null there, and ``missing`` says so when none has one.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, F, Q, QuerySet, Sum
from django.utils import timezone

from apps.dashboard.router_stream import router_groups, router_stream_read
from apps.jobs.models import Job
from apps.metrics.stats import histogram
from apps.trajectories.models import (
    TERMINAL_TRAJECTORY_STATUSES,
    LLMWorkerReport,
    RouterPolicy,
    RouterPolicyName,
    RouterPredictorName,
    Trajectory,
    TrajectoryStatus,
)

TRAJECTORY_LIMIT = 200
GROUP_LIMIT = 50
HISTOGRAM_SAMPLE = 5000  # active trajectories the predicted-remaining histogram is drawn from
GROUP_WINDOW = 2000  # newest grouped trajectories the groups shown are drawn from
ACTIVE = "active"
STATUS_FILTERS = frozenset({ACTIVE, *TrajectoryStatus.values})

REPORT_FRESH_S = 30.0  # a worker report older than this is not shown as current
NOT_REPORTED = (
    "KV-cache use and each LLM worker's own request queue: no router reported its workers in "
    "the last 30 s (the workers' load shown is counted from the trajectories placed on each)"
)
_REPORT_FIELDS = (
    "router",
    "healthy",
    "draining",
    "in_flight",
    "running_requests",
    "queued_requests",
    "kv_usage",
    "kv_used_tokens",
    "generation_tokens_per_s",
)

ACTIVE_STATUSES = tuple(s for s in TrajectoryStatus.values if s not in TERMINAL_TRAJECTORY_STATUSES)
ENDED_STATUSES = tuple(sorted(TERMINAL_TRAJECTORY_STATUSES))
# Ended trajectories only grow in number (a count over all their rows), so live snapshots refresh
# those counts at most this often, as ``live.snapshots.live_job_counts`` does for actions.
ENDED_COUNTS_TTL_S = 10.0
_ended_counts: dict[int | None, tuple[float, dict[str, int]]] = {}


def _active(trajectories: QuerySet[Trajectory]) -> QuerySet[Trajectory]:
    return trajectories.filter(status__in=ACTIVE_STATUSES)


def ended_counts(scope: QuerySet[Trajectory], job_id: int | None) -> dict[str, int]:
    """Finished / aborted / failed trajectories of the scope, at most ``ENDED_COUNTS_TTL_S`` old."""
    moment = time.monotonic()
    cached = _ended_counts.get(job_id)
    if cached is not None and moment - cached[0] <= ENDED_COUNTS_TTL_S:
        return cached[1]
    rows = scope.filter(status__in=ENDED_STATUSES).values("status").annotate(n=Count("id"))
    counts = {row["status"]: row["n"] for row in rows}
    _ended_counts[job_id] = (moment, counts)
    return counts


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


def active_summary(scope: QuerySet[Trajectory]) -> dict[str, Any]:
    """One pass over the trajectories that have not ended: per LLM worker its trajectories by
    status, their tokens and predicted remaining tokens (Heddle's load: the work still to come,
    §5.1), the counts per status and how many wait unplaced."""
    rows = (
        _active(scope)
        .values("llm_worker", "status")
        .annotate(n=Count("id"), tokens=Sum("tokens"), predicted=Sum("predicted_remaining_tokens"))
        .order_by("llm_worker", "status")
    )
    workers: dict[str, dict[str, Any]] = {}
    counts = dict.fromkeys(ACTIVE_STATUSES, 0)
    unplaced = 0
    for row in rows:
        counts[row["status"]] += row["n"]
        if not row["llm_worker"]:
            unplaced += row["n"]
            continue
        worker = workers.setdefault(
            row["llm_worker"],
            {
                "name": row["llm_worker"],
                "trajectories": 0,
                **dict.fromkeys(ACTIVE_STATUSES, 0),
                "tokens": 0,
                "predicted_remaining_tokens": 0,
            },
        )
        worker["trajectories"] += row["n"]
        worker[row["status"]] += row["n"]
        worker["tokens"] += int(row["tokens"] or 0)
        worker["predicted_remaining_tokens"] += int(row["predicted"] or 0)
    return {"workers": list(workers.values()), "counts": counts, "unplaced": unplaced}


def group_rows(scope: QuerySet[Trajectory]) -> list[dict[str, Any]]:
    """DARTS groups among the newest ``GROUP_WINDOW`` grouped trajectories, newest first, each
    counted in full: samples drawn, running, kept (finished) and pruned (aborted) per prompt
    group (darts §4, tail pruning). Two queries, bounded whatever the table holds."""
    keys: list[tuple[int, int, str]] = []
    for key in (
        scope.exclude(group_id="")
        .order_by("-id")
        .values_list("job_id", "training_step", "group_id")[:GROUP_WINDOW]
    ):
        if key not in keys:
            keys.append(key)
            if len(keys) == GROUP_LIMIT:
                break
    if not keys:
        return []
    which = Q()
    for job_id, step, group in keys:
        which |= Q(job_id=job_id, training_step=step, group_id=group)
    rows = (
        Trajectory.objects.filter(which)
        .values("job_id", "training_step", "group_id")
        .annotate(
            samples=Count("id"),
            finished=Count("id", filter=Q(status=TrajectoryStatus.FINISHED)),
            aborted=Count("id", filter=Q(status=TrajectoryStatus.ABORTED)),
            failed=Count("id", filter=Q(status=TrajectoryStatus.FAILED)),
        )
        .order_by("-training_step", "-job_id", "group_id")
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
    stream = router_stream_read((row.pk for row in page), job.pk if job else None)
    live = stream.fields if stream is not None else None
    summary = active_summary(scope)
    predicted = _active(scope).filter(predicted_remaining_tokens__isnull=False)
    remaining = predicted.values_list("predicted_remaining_tokens", flat=True)[:HISTOGRAM_SAMPLE]
    counts = {**summary["counts"], **ended_counts(scope, job.pk if job else None)}
    reported = with_worker_reports(summary["workers"], now)
    return {
        "t": now.timestamp(),
        "job": job.pk if job else None,
        "status": status,
        "counts": {value: counts.get(value, 0) for value in TrajectoryStatus.values},
        "unplaced": summary["unplaced"],
        "workers": summary["workers"],
        "trajectories": [_trajectory_row(row, live) for row in page],
        "router_fields": live is not None,
        "groups": group_rows(scope),
        "router_groups": router_groups(stream) if stream is not None else None,
        "remaining_histogram": histogram([float(t) for t in remaining if t is not None]),
        "routers": router_policies(),
        "missing": [] if reported else [NOT_REPORTED],
    }


def with_worker_reports(workers: list[dict[str, Any]], now: datetime) -> bool:
    """Add each worker's newest fresh report (router, health, engine load) to its row, in
    place; a reported worker holding no trajectory gets a row of its own. One query. Whether
    any worker was reported."""
    fresh = LLMWorkerReport.objects.filter(
        reported_at__gte=now - timedelta(seconds=REPORT_FRESH_S)
    ).order_by("reported_at")
    by_name = {worker["name"]: worker for worker in workers}
    reports = {report.name: report for report in fresh}  # the newest wins a shared name
    for worker in workers:
        worker.update(dict.fromkeys(_REPORT_FIELDS), reported_at=None)
    for name, report in sorted(reports.items()):
        row = by_name.get(name)
        if row is None:
            row = {
                "name": name,
                "trajectories": 0,
                **dict.fromkeys(ACTIVE_STATUSES, 0),
                "tokens": 0,
                "predicted_remaining_tokens": 0,
            }
            workers.append(row)
        row.update({field: getattr(report, field) for field in _REPORT_FIELDS})
        row["reported_at"] = report.reported_at.timestamp()
    return bool(reports)


def router_policy_row(row: RouterPolicy) -> dict[str, Any]:
    return {
        "router": row.router,
        "policy": row.policy,
        "predictor": row.predictor,
        "version": row.version,
        "changed_by": row.changed_by.get_username() if row.changed_by else None,
        "changed_at": row.changed_at.timestamp(),
    }


def _choices(choices: list[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"value": value, "label": str(label)} for value, label in choices]


def router_policies() -> dict[str, Any]:
    """Every router's stored policy (who changed it, when) and the choices. Two queries."""
    rows = RouterPolicy.objects.select_related("changed_by").order_by("router")
    reported = sorted(
        set(LLMWorkerReport.objects.values_list("router", flat=True).distinct())
        - {row.router for row in rows}
    )
    return {
        "policies": [router_policy_row(row) for row in rows],
        "unset": reported,  # routers that report workers but were never given a policy here
        "policy_choices": [
            {"value": v, "label": str(label)} for v, label in RouterPolicyName.choices
        ],
        "predictor_choices": [
            {"value": v, "label": str(label)} for v, label in RouterPredictorName.choices
        ],
    }
