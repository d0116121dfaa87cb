"""Read-only admin for rollups (they are written by the beat task, never by hand)."""

from django.contrib import admin

from apps.metrics.models import JobRollup, PoolRollup

_COLUMNS = ("bucket_start", "waiting", "running", "completed", "act_p50_s", "act_p99_s", "util_cpu")


@admin.register(PoolRollup)
class PoolRollupAdmin(admin.ModelAdmin):
    list_display = ("pool", *_COLUMNS)
    list_filter = ("pool",)
    date_hierarchy = "bucket_start"

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(JobRollup)
class JobRollupAdmin(admin.ModelAdmin):
    list_display = ("job", *_COLUMNS, "active_trajectories")
    list_filter = ("job",)
    date_hierarchy = "bucket_start"

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
