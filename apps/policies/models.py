"""Policies: the tunable knobs of each scheduler, versioned (who changed what, when)."""

from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models
from django.db.models import Q

from apps.resources.models import ResourcePool


class PolicyKind(models.TextChoices):
    ACTION_SCHEDULER = "action_scheduler", "action scheduler (arl-tangram)"
    TRAJECTORY_ROUTER = "trajectory_router", "trajectory router (heddle)"
    ROLLOUT_SHAPER = "rollout_shaper", "rollout shaper (darts)"
    BUFFER = "buffer", "experience buffer (artos)"


class Policy(models.Model):
    """The current settings of one policy; every change is kept as a PolicyVersion."""

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=32, choices=PolicyKind.choices)
    pool = models.ForeignKey(
        ResourcePool, null=True, blank=True, on_delete=models.SET_NULL, related_name="policies"
    )
    settings = models.JSONField(default=dict, blank=True)
    version = models.PositiveIntegerField(default=1)
    updated_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "policies"
        constraints = [
            models.CheckConstraint(name="policy_version_ge_1", condition=Q(version__gte=1))
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"


class PolicyVersion(models.Model):
    """One saved state of a policy: the full settings and the diff against the previous one."""

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    settings = models.JSONField(default=dict)
    # {"added": {...}, "removed": {...}, "changed": {"depth": [old, new]}}
    diff = models.JSONField(default=dict)
    author = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    comment = models.CharField(max_length=500, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["policy", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "version"], name="policyversion_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.policy.name} v{self.version}"
