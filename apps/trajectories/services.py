"""Writes for trajectories: creation and progress updates (heddle §4: progressive prediction)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.jobs.models import Job
from apps.trajectories.models import TERMINAL_TRAJECTORY_STATUSES, Trajectory
from apps.trajectories.router_registry import (
    router_trajectory_published,
    router_trajectory_withdrawn,
)

MONOTONIC_FIELDS = ("tokens", "steps")
UPDATABLE_FIELDS = (
    "status",
    "tokens",
    "steps",
    "predicted_remaining_tokens",
    "llm_worker",
    "queueing_s",
    "generation_s",
    "tool_s",
    "total_s",
    "reward",
    "prompt_tokens",
    "step_records",
)
# What the router alone records of a trajectory's steps (the length predictor's training data).
RECORD_FIELDS = ("prompt_tokens", "step_records")


class TrajectoryUpdateError(ValueError):
    def __init__(self, field: str, reason: str, *, conflict: bool = False):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason
        self.conflict = conflict


def trajectory_create(*, job: Job, **fields: Any) -> Trajectory:
    """A new trajectory; once committed, the LLM router serves it for ``job``."""
    trajectory = Trajectory.objects.create(job=job, **fields)
    router_trajectory_published(trajectory=trajectory)
    return trajectory


@transaction.atomic
def trajectory_update(*, trajectory_id: int, changes: dict[str, Any]) -> Trajectory:
    """Apply progress; tokens and steps never go back and an ended trajectory stays ended."""
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise TrajectoryUpdateError(sorted(unknown)[0], "not updatable")
    trajectory = Trajectory.objects.select_for_update().get(pk=trajectory_id)
    if trajectory.status in TERMINAL_TRAJECTORY_STATUSES and changes:
        raise TrajectoryUpdateError(
            "status", f"trajectory already {trajectory.status}; it cannot change", conflict=True
        )
    for field in MONOTONIC_FIELDS:
        if field in changes and changes[field] < getattr(trajectory, field):
            raise TrajectoryUpdateError(
                field, f"must not decrease (was {getattr(trajectory, field)})"
            )
    for field, value in changes.items():
        setattr(trajectory, field, value)
    if changes.get("status") in TERMINAL_TRAJECTORY_STATUSES:
        trajectory.finished_at = timezone.now()
        router_trajectory_withdrawn(trajectory_id=trajectory.pk)  # it generates nothing more
    trajectory.save()
    return trajectory


def trajectory_records_complete(*, trajectory_id: int, records: dict[str, Any]) -> bool:
    """Keep the router's record of an ended trajectory's steps when it arrives after the end.

    The trainer's end can reach the control plane before the router's final snapshot, which is
    the only one carrying the records; an ended row otherwise refuses every change. Only the
    records are written, once (never over earlier ones), and nothing else of the row changes.
    False when the row is not ended or already holds records.
    """
    unknown = set(records) - set(RECORD_FIELDS)
    if unknown:
        raise TrajectoryUpdateError(sorted(unknown)[0], "not a record of an ended trajectory")
    updated = Trajectory.objects.filter(
        pk=trajectory_id, status__in=TERMINAL_TRAJECTORY_STATUSES, step_records__isnull=True
    ).update(**records)
    return updated == 1
