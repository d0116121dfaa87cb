from django.contrib import admin

from apps.resources.models import ApiQuota, Node, ResourcePool, Service, Tool


@admin.register(ResourcePool)
class ResourcePoolAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "created_at"]
    list_filter = ["kind"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "pool",
        "status",
        "cores",
        "memory_mb",
        "gpus",
        "gpu_memory_mb",
        "last_heartbeat_at",
    ]
    list_filter = ["status", "pool"]
    search_fields = ["name", "address"]
    readonly_fields = ["token_prefix", "registered_at", "last_heartbeat_at"]
    list_select_related = ["pool"]


@admin.register(Service)
class ServiceAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "model", "pool", "memory_mb", "updated_at"]
    list_filter = ["backend", "pool"]
    search_fields = ["name", "model", "description"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "timeout_s", "idempotent", "updated_at"]
    list_filter = ["pool", "idempotent"]
    search_fields = ["name", "command_template", "description"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(ApiQuota)
class ApiQuotaAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "concurrency_limit", "quota_per_period", "period_s"]
    list_filter = ["pool"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_at", "updated_at"]
