"""Jobs (tenants of the cluster) and the API keys that act for them (DESIGN.md "Domain model")."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class JobStatus(models.TextChoices):
    ACTIVE = "active", "active"
    PAUSED = "paused", "paused"
    FINISHED = "finished", "finished"


class Job(models.Model):
    """One RL training job: owner, API keys, resource quota and policy overrides."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True, default="")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="loom_jobs"
    )
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.ACTIVE)
    # {"cpu": 64, "gpu": 8, ...}: the most units of each resource the job may hold at once.
    resource_quota = models.JSONField(default=dict, blank=True)
    # Per-job overrides of scheduler/router/shaper policy knobs, merged over the pool's Policy.
    policy_overrides = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A bearer key, stored as a sha256 hash; the raw key is shown exactly once at creation.

    A key belongs either to a job (it sees only that job's objects) or to a staff user (it acts
    as that user and sees everything).
    """

    PREFIX_LENGTH = 12

    name = models.CharField(max_length=100, blank=True, default="")
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="loom_api_keys",
        help_text="For a staff key: the staff user the key acts as.",
    )
    prefix = models.CharField(max_length=PREFIX_LENGTH, db_index=True, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                name="apikey_job_xor_user",
                condition=(
                    Q(job__isnull=False, user__isnull=True)
                    | Q(job__isnull=True, user__isnull=False)
                ),
            )
        ]

    def __str__(self) -> str:
        owner = f"job {self.job_id}" if self.job_id else f"user {self.user_id}"
        return f"{self.prefix}… ({owner})"

    @property
    def is_revoked(self) -> bool:
        return self.revoked_at is not None
