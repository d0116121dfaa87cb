from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.actions import services
from apps.actions.models import Action


@admin.register(Action)
class ActionAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "job",
        "status",
        "tool",
        "service",
        "priority",
        "pool",
        "key_resource",
        "min_units",
        "max_units",
        "node",
        "attempts",
        "submitted_at",
        "finished_at",
    ]
    list_filter = ["status", "pool", "key_resource", "tool", "service", "submitted_at"]
    search_fields = ["=id", "job__name", "command", "idempotency_key", "error_reason"]
    readonly_fields = ["submitted_at", "scheduled_at", "started_at", "finished_at", "attempts"]
    raw_id_fields = ["job", "trajectory", "node"]
    list_select_related = ["job", "tool", "service", "pool", "node"]
    date_hierarchy = "submitted_at"
    actions = ["cancel_actions"]

    @admin.action(description="Cancel the selected actions")
    def cancel_actions(self, request: HttpRequest, queryset: QuerySet[Action]) -> None:
        cancelled = services.action_cancel_many(
            action_ids=list(queryset.values_list("pk", flat=True)),
            reason=f"cancelled in the admin by {request.user}",
        )
        self.message_user(request, f"Cancelled {len(cancelled)} action(s).", messages.SUCCESS)
