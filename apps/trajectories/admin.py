from typing import Any

from django.contrib import admin

from apps.trajectories.models import LLMWorkerReport, RouterPolicy, Trajectory


@admin.register(Trajectory)
class TrajectoryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "job",
        "training_step",
        "group_id",
        "sample_index",
        "status",
        "tokens",
        "steps",
        "predicted_remaining_tokens",
        "llm_worker",
        "reward",
        "updated_at",
    ]
    list_filter = ["status", "job", "training_step"]
    search_fields = ["=id", "prompt_id", "group_id", "llm_worker", "job__name"]
    readonly_fields = ["created_at", "updated_at", "finished_at"]
    raw_id_fields = ["job"]
    list_select_related = ["job"]


@admin.register(RouterPolicy)
class RouterPolicyAdmin(admin.ModelAdmin):
    """Read-only here: a change made through the admin would not be published to the router;
    the Rollouts page's form (``router_policy_set``) is the one way to change it."""

    list_display = ["router", "policy", "predictor", "version", "changed_by", "changed_at"]
    readonly_fields = ["router", "policy", "predictor", "version", "changed_by", "changed_at"]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(LLMWorkerReport)
class LLMWorkerReportAdmin(admin.ModelAdmin):
    list_display = [
        "router",
        "name",
        "healthy",
        "in_flight",
        "running_requests",
        "queued_requests",
        "kv_usage",
        "reported_at",
    ]
    list_filter = ["router", "healthy"]
