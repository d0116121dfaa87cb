"""Reads for trajectories, restricted to what the principal sees."""

from __future__ import annotations

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404

from apps.jobs.access import Principal, job_ids_filter
from apps.trajectories.models import Trajectory


def trajectory_list(
    *,
    principal: Principal,
    job_id: int | None = None,
    statuses: list[str] | None = None,
    training_step: int | None = None,
    group_id: str | None = None,
) -> QuerySet[Trajectory]:
    trajectories = Trajectory.objects.filter(**job_ids_filter(principal))
    if job_id is not None:
        trajectories = trajectories.filter(job_id=job_id)
    if statuses:
        trajectories = trajectories.filter(status__in=statuses)
    if training_step is not None:
        trajectories = trajectories.filter(training_step=training_step)
    if group_id is not None:
        trajectories = trajectories.filter(group_id=group_id)
    return trajectories


def trajectory_get(*, principal: Principal, trajectory_id: int) -> Trajectory:
    return get_object_or_404(trajectory_list(principal=principal), pk=trajectory_id)
