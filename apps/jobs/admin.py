"""Admin for jobs and API keys: a new key's raw value is shown once, in a message."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from apps.jobs import services
from apps.jobs.authentication import hash_key
from apps.jobs.models import ApiKey, Job


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fk_name = "job"
    extra = 0
    can_delete = False
    fields = ["name", "prefix", "created_at", "last_used_at", "revoked_at"]
    readonly_fields = ["name", "prefix", "created_at", "last_used_at", "revoked_at"]
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "status", "created_at", "updated_at"]
    list_filter = ["status", "created_at"]
    search_fields = ["name", "description", "owner__username"]
    readonly_fields = ["created_at", "updated_at"]
    raw_id_fields = ["owner"]
    inlines = [ApiKeyInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = ["prefix", "name", "job", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["revoked_at", "created_at"]
    search_fields = ["prefix", "name", "job__name", "user__username"]
    readonly_fields = ["prefix", "created_by", "created_at", "last_used_at", "revoked_at"]
    fields = [
        "name",
        "job",
        "user",
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke_keys"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        raw_key = services.generate_raw_key()
        obj.prefix = raw_key[: ApiKey.PREFIX_LENGTH]
        obj.key_hash = hash_key(raw_key)
        obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
        messages.warning(
            request,
            f"New API key (shown only now, store it): {raw_key}",
        )

    @admin.action(description="Revoke the selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = sum(services.api_key_revoke(api_key=key) for key in queryset)
        self.message_user(request, f"Revoked {revoked} key(s).", messages.SUCCESS)
