"""Admin for simulator runs (read-only: they are created from the Launch page)."""

from django.contrib import admin

from apps.dashboard.models import SimulationRun


@admin.register(SimulationRun)
class SimulationRunAdmin(admin.ModelAdmin):
    list_display = ("id", "status", "created_by", "created_at", "finished_at")
    list_filter = ("status",)
    readonly_fields = (
        "created_by",
        "created_at",
        "finished_at",
        "status",
        "params",
        "result",
        "error",
    )
