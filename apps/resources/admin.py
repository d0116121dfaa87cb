from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from apps.resources.capacity import CapacitySerializer
from apps.resources.models import ApiQuota, Node, ResourcePool, Service, Tool
from apps.resources.services import capacity_totals


class NodeForm(forms.ModelForm):
    """Capacity edited here follows the agents' registration rules (NUMA layout and all)."""

    class Meta:
        model = Node
        fields = ["name", "pool", "status", "address", "agent_version", "capacity", "usage"]

    def clean_capacity(self) -> dict[str, Any]:
        serializer = CapacitySerializer(data=self.cleaned_data.get("capacity"))
        if not serializer.is_valid():
            raise forms.ValidationError(str(serializer.errors))
        return dict(serializer.validated_data)


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
    readonly_fields = [
        "cores",
        "memory_mb",
        "gpus",
        "gpu_memory_mb",
        "token_prefix",
        "registered_at",
        "last_heartbeat_at",
    ]
    list_select_related = ["pool"]
    form = NodeForm

    def save_model(self, request: HttpRequest, obj: Node, form: Any, change: bool) -> None:
        for field, value in capacity_totals(obj.capacity).items():
            setattr(obj, field, value)
        super().save_model(request, obj, form, change)


@admin.register(Service)
class ServiceAdmin(admin.ModelAdmin):
    """The registry's rules are ``Service.clean``'s (``apps.resources.service_rules``), the
    same the REST API applies."""

    list_display = [
        "name",
        "backend",
        "task",
        "model",
        "pool",
        "allowed_dop",
        "memory_mb",
        "max_sequences",
        "max_tokens",
        "updated_at",
    ]
    list_filter = ["backend", "task", "pool"]
    search_fields = ["name", "model", "description"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(Tool)
class ToolAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "timeout_s", "idempotent", "network", "updated_at"]
    list_filter = ["pool", "idempotent", "network"]
    search_fields = ["name", "command_template", "description"]
    readonly_fields = ["created_at", "updated_at"]


@admin.register(ApiQuota)
class ApiQuotaAdmin(admin.ModelAdmin):
    list_display = ["name", "pool", "concurrency_limit", "quota_per_period", "period_s"]
    list_filter = ["pool"]
    search_fields = ["name", "description"]
    readonly_fields = ["created_at", "updated_at"]
