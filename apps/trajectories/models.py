"""Trajectories: one multi-turn rollout of one prompt sample (heddle §3)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from apps.jobs.models import Job


class TrajectoryStatus(models.TextChoices):
    PENDING = "pending", "pending"
    GENERATING = "generating", "generating"
    TOOL_CALL = "tool_call", "in a tool call"
    FINISHED = "finished", "finished"
    ABORTED = "aborted", "aborted"
    FAILED = "failed", "failed"


TERMINAL_TRAJECTORY_STATUSES = frozenset(
    {TrajectoryStatus.FINISHED, TrajectoryStatus.ABORTED, TrajectoryStatus.FAILED}
)


class Trajectory(models.Model):
    """Progress, prediction, placement and timings of one trajectory (heddle §4–§5)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="trajectories")
    training_step = models.PositiveIntegerField(default=0)
    prompt_id = models.CharField(max_length=200, blank=True, default="")
    group_id = models.CharField(max_length=200, blank=True, default="")
    sample_index = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=TrajectoryStatus.choices, default=TrajectoryStatus.PENDING
    )
    tokens = models.PositiveBigIntegerField(default=0, help_text="tokens generated so far")
    steps = models.PositiveIntegerField(default=0, help_text="turns completed so far")
    predicted_remaining_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    llm_worker = models.CharField(max_length=200, blank=True, default="")
    queueing_s = models.FloatField(default=0.0)
    generation_s = models.FloatField(default=0.0)
    tool_s = models.FloatField(default=0.0)
    total_s = models.FloatField(default=0.0)
    reward = models.FloatField(null=True, blank=True)
    # What the router recorded of a finished trajectory, the length predictor's training data
    # (heddle §4.1): its prompt's tokens and, per LLM step, [output tokens, tool seconds after].
    prompt_tokens = models.PositiveIntegerField(default=0)
    step_records = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["job", "status"], name="traj_job_status"),
            models.Index(fields=["job", "training_step", "group_id"], name="traj_job_step_group"),
        ]
        constraints = [
            models.CheckConstraint(
                name="traj_timings_nonneg",
                condition=Q(queueing_s__gte=0, generation_s__gte=0, tool_s__gte=0, total_s__gte=0),
            ),
        ]
        verbose_name_plural = "trajectories"

    def __str__(self) -> str:
        return f"trajectory {self.pk} (job {self.job_id}, step {self.training_step})"


class RouterPolicyName(models.TextChoices):
    HEDDLE = "heddle", "Heddle (PPS priority, presorted-DP placement)"
    ROUND_ROBIN = "round_robin", "round-robin"
    LEAST_LOAD = "least_load", "least load"


class RouterPredictorName(models.TextChoices):
    PROMPT_HISTORY = "prompt_history", "prompt-history prior"
    PROGRESSIVE = "progressive", "progressive (trained)"


class RouterPolicy(models.Model):
    """The routing policy and length predictor an operator chose for one LLM router; the router
    follows it without a restart (``workers.router.live_policy``). ``version`` grows with each
    change; who changed it and when are kept with it."""

    router = models.CharField(max_length=100, unique=True)
    policy = models.CharField(max_length=32, choices=RouterPolicyName.choices)
    predictor = models.CharField(max_length=32, choices=RouterPredictorName.choices)
    version = models.PositiveIntegerField(default=1)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    changed_at = models.DateTimeField()

    class Meta:
        ordering = ["router"]
        verbose_name_plural = "router policies"

    def __str__(self) -> str:
        return f"router {self.router}: {self.policy}, {self.predictor} (v{self.version})"


class LLMWorkerReport(models.Model):
    """The newest report of one LLM worker behind one router: health, the router's in-flight
    requests on it, and the engine's own load from its metrics (None: the engine reports it
    not)."""

    router = models.CharField(max_length=100)
    name = models.CharField(max_length=100)
    url = models.CharField(max_length=300, blank=True, default="")
    healthy = models.BooleanField(default=True)
    draining = models.BooleanField(default=False)
    in_flight = models.PositiveIntegerField(default=0)
    running_requests = models.PositiveIntegerField(null=True, blank=True)
    queued_requests = models.PositiveIntegerField(null=True, blank=True)
    kv_usage = models.FloatField(null=True, blank=True)
    kv_used_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    generation_tokens_per_s = models.FloatField(null=True, blank=True)
    reported_at = models.DateTimeField()

    class Meta:
        ordering = ["router", "name"]
        constraints = [
            models.UniqueConstraint(fields=["router", "name"], name="llm_worker_report_unique"),
            models.CheckConstraint(
                name="llm_worker_kv_usage_fraction",
                condition=Q(kv_usage__isnull=True) | Q(kv_usage__gte=0, kv_usage__lte=1),
            ),
        ]

    def __str__(self) -> str:
        return f"LLM worker {self.name} of router {self.router}"
