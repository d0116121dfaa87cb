from django.contrib import admin

from apps.buffers.models import Buffer, Trigger


class TriggerInline(admin.TabularInline):
    model = Trigger
    extra = 0
    readonly_fields = ["created_at", "updated_at"]


@admin.register(Buffer)
class BufferAdmin(admin.ModelAdmin):
    list_display = ["name", "job", "capacity", "sampler", "sync_mode", "updated_at"]
    list_filter = ["sampler", "sync_mode"]
    search_fields = ["name", "job__name"]
    readonly_fields = ["created_at", "updated_at"]
    inlines = [TriggerInline]


@admin.register(Trigger)
class TriggerAdmin(admin.ModelAdmin):
    list_display = ["name", "buffer", "kind", "enabled", "updated_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "buffer__name"]
    readonly_fields = ["created_at", "updated_at"]
