"""Actions: every external invocation with its vectorised, possibly elastic demand (arl-tangram §3).

Invariants live in the database: min ≤ max and non-negative units of the key resource, an
allocation exactly while scheduled or running, one idempotency key per job. State changes are
conditional UPDATEs whose guards come from one table (``workers.scheduler.transitions``), so no
action can be started twice.
"""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from apps.jobs.models import Job
from apps.resources.models import Node, ResourcePool, Service, Tool
from apps.trajectories.models import Trajectory
from workers.scheduler import transitions


class ActionStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    SCHEDULED = "scheduled", "scheduled"
    RUNNING = "running", "running"
    SUCCEEDED = "succeeded", "succeeded"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    TIMED_OUT = "timed_out", "timed out"


ACTIVE_STATUSES = tuple(ActionStatus(status) for status in transitions.ACTIVE)
ALLOCATED_STATUSES = tuple(ActionStatus(status) for status in transitions.ALLOCATED)
TERMINAL_STATUSES = tuple(ActionStatus(status) for status in transitions.TERMINAL)


class Action(models.Model):
    # Every index is written on each insert and on each status change (status is indexed, so no
    # update is HOT): job and pool lookups use the composite indexes below, whose first column
    # they are, instead of an index of their own.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="actions", db_index=False)
    trajectory = models.ForeignKey(
        Trajectory, null=True, blank=True, on_delete=models.SET_NULL, related_name="actions"
    )
    tool = models.ForeignKey(
        Tool, null=True, blank=True, on_delete=models.PROTECT, related_name="actions"
    )
    service = models.ForeignKey(
        Service, null=True, blank=True, on_delete=models.PROTECT, related_name="actions"
    )
    pool = models.ForeignKey(
        ResourcePool,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="actions",
        db_index=False,
    )
    command = models.TextField(blank=True, default="")
    payload = models.JSONField(null=True, blank=True)
    # A service action's input (arl-tangram §5.3), checked against the service's limits at
    # submission, and its priority, forwarded to the service (higher runs first).
    request = models.JSONField(null=True, blank=True)
    priority = models.IntegerField(default=0)

    # {"cpu": {"min": 1, "max": 8}, "gpu": {"units": [1, 2, 4, 8]}, "api:openai": {...}}
    demand = models.JSONField()
    # {"resource": "cpu", "efficiency": [E(1), E(2), ...]}; null = unknown elasticity.
    elasticity = models.JSONField(null=True, blank=True)
    key_resource = models.CharField(max_length=120)
    min_units = models.PositiveIntegerField()
    max_units = models.PositiveIntegerField()
    single_unit_duration_s = models.FloatField(null=True, blank=True)
    timeout_s = models.FloatField(null=True, blank=True)

    status = models.CharField(
        max_length=16, choices=ActionStatus.choices, default=ActionStatus.QUEUED
    )
    # {"cores": [0, 1], "gpus": [], "units": 2, ...} as decided by the scheduler.
    allocation = models.JSONField(null=True, blank=True)
    node = models.ForeignKey(
        Node, null=True, blank=True, on_delete=models.SET_NULL, related_name="actions"
    )
    attempts = models.PositiveIntegerField(default=0)

    submitted_at = models.DateTimeField()
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    exit_code = models.IntegerField(null=True, blank=True)
    output = models.TextField(blank=True, default="")
    score = models.FloatField(null=True, blank=True)
    # A GPU service action's report from its agent (arl-tangram §5.3): where its time went
    # (queue_s, restore_s, execute_s) and the service-cache events it caused (restores,
    # evictions). NULL for the other kinds.
    service_timings = models.JSONField(null=True, blank=True)
    cache_events = models.JSONField(null=True, blank=True)
    error_reason = models.TextField(blank=True, default="")

    # NULL (not "") means "no key", so the partial unique constraint skips it.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["pool", "status", "submitted_at"], name="action_pool_status_sub"),
            models.Index(fields=["job", "status", "submitted_at"], name="action_job_status_sub"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="action_unique_idempotency_key_per_job",
            ),
            models.CheckConstraint(
                name="action_units_nonneg", condition=Q(min_units__gte=0, max_units__gte=1)
            ),
            models.CheckConstraint(
                name="action_min_le_max", condition=Q(min_units__lte=F("max_units"))
            ),
            models.CheckConstraint(
                name="action_allocated_iff_scheduled_or_running",
                condition=(
                    Q(status__in=ALLOCATED_STATUSES, allocation__isnull=False)
                    | ~Q(status__in=ALLOCATED_STATUSES)
                ),
            ),
            models.CheckConstraint(
                name="action_queued_has_no_allocation",
                condition=~Q(status=ActionStatus.QUEUED) | Q(allocation__isnull=True),
            ),
            models.CheckConstraint(
                name="action_request_needs_service",
                condition=Q(request__isnull=True) | Q(service__isnull=False),
            ),
            models.CheckConstraint(
                name="action_tool_xor_service",
                condition=Q(tool__isnull=True) | Q(service__isnull=True),
            ),
            models.CheckConstraint(
                name="action_positive_durations",
                condition=(
                    (Q(single_unit_duration_s__isnull=True) | Q(single_unit_duration_s__gt=0))
                    & (Q(timeout_s__isnull=True) | Q(timeout_s__gt=0))
                ),
            ),
            models.CheckConstraint(
                name="action_finished_when_terminal",
                condition=~Q(status__in=TERMINAL_STATUSES) | Q(finished_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"action {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES
