"""Buffer and trigger definitions in the admin. The forms check what the API checks
(``Buffer.clean`` and ``Trigger.clean`` run ``apps.buffers.rules``): a trigger added inline is
checked against the schema being saved with it."""

from django.contrib import admin
from django.http import HttpRequest

from apps.buffers.models import Buffer, BufferActorState, BufferSnapshot, Trigger


class TriggerInline(admin.TabularInline):
    model = Trigger
    extra = 0
    fields = ["name", "kind", "params", "target", "enabled"]


@admin.register(Buffer)
class BufferAdmin(admin.ModelAdmin):
    list_display = ["name", "job", "capacity", "eviction", "sampler", "sync_mode", "updated_at"]
    list_filter = ["sampler", "sync_mode", "eviction"]
    search_fields = ["name", "job__name"]
    readonly_fields = ["service_name", "created_at", "updated_at"]
    fields = [
        "job",
        "name",
        "schema",
        "capacity",
        "eviction",
        "sampler",
        "sync_mode",
        "config",
        "service_name",
        "created_at",
        "updated_at",
    ]
    inlines = [TriggerInline]


@admin.register(Trigger)
class TriggerAdmin(admin.ModelAdmin):
    list_display = ["name", "buffer", "kind", "target", "enabled", "updated_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "buffer__name"]
    readonly_fields = ["created_at", "updated_at"]


class ReportedAdmin(admin.ModelAdmin):
    """Read-only: what the buffer service reported."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(BufferSnapshot)
class BufferSnapshotAdmin(ReportedAdmin):
    list_display = ["buffer", "taken_at", "held", "steps_written", "samples"]
    list_select_related = ["buffer__job"]
    date_hierarchy = "taken_at"


@admin.register(BufferActorState)
class BufferActorStateAdmin(ReportedAdmin):
    list_display = ["buffer", "workflow", "actor", "state", "invocations", "reported_at"]
    list_filter = ["state"]
    list_select_related = ["buffer__job"]
    search_fields = ["workflow", "actor", "buffer__name"]
