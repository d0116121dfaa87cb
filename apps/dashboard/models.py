"""Dashboard models: the permission anchor for operator roles and simulator runs from Launch."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class DashboardAccess(models.Model):
    """No table: only carries the two role permissions (see roles.py)."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [
            ("view_dashboard", "Can watch the operator dashboard"),
            (
                "operate_dashboard",
                "Can change policies, cancel actions, drain nodes and launch runs",
            ),
        ]

    def __str__(self) -> str:
        return "dashboard access"


class SimulationRun(models.Model):
    """A trace replayed through the Tangram simulator under one or two policies (Launch page)."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        RUNNING = "running", "running"
        SUCCEEDED = "succeeded", "succeeded"
        FAILED = "failed", "failed"

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    params = models.JSONField(help_text="trace spec and the policies compared")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["-created_at"], name="dash_simrun_created_idx")]

    def __str__(self) -> str:
        return f"simulation #{self.pk} ({self.status})"
