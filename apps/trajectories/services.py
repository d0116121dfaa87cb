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
# The router's timings of a trajectory, kept from a state that arrives after its end.
LATE_GROWING_FIELDS = ("queueing_s", "generation_s", "tool_s", "total_s")


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


def trajectory_final_state_keep(*, trajectory_id: int, changes: dict[str, Any]) -> bool:
    """Keep what the router's state of an ended trajectory adds when it arrives after the end.

    A trainer ends a trajectory as soon as its last turn returns, before the router's state of
    that turn (and its final snapshot, the only one carrying the step records) reaches the
    control plane; an ended row otherwise refuses every change, and kept the counts of an
    earlier snapshot (none at all for a trajectory ended within a state flush of its turns).
    The status and the reward stay the trainer's: only the router's counts (tokens, steps,
    prompt tokens; never lower), its timings (never lower), its worker (when none is known)
    and its step records (once, never over earlier ones) are written. False when the row is not
    ended or nothing of it changes.
    """
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise TrajectoryUpdateError(sorted(unknown)[0], "not updatable")
    with transaction.atomic():
        trajectory = (
            Trajectory.objects.select_for_update()
            .filter(pk=trajectory_id, status__in=TERMINAL_TRAJECTORY_STATUSES)
            .first()
        )
        if trajectory is None:
            return False
        kept: dict[str, Any] = {}
        for field in (*MONOTONIC_FIELDS, *LATE_GROWING_FIELDS):
            if field in changes and changes[field] > (getattr(trajectory, field) or 0):
                kept[field] = changes[field]
        if changes.get("llm_worker") and not trajectory.llm_worker:
            kept["llm_worker"] = changes["llm_worker"]
        if "step_records" in changes and trajectory.step_records is None:
            kept.update({field: changes[field] for field in RECORD_FIELDS if field in changes})
        if not kept:
            return False
        Trajectory.objects.filter(pk=trajectory_id).update(**kept)
        return True
