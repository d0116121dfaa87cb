from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from apps.policies import services
from apps.policies.models import Policy, PolicyVersion
from apps.policies.validation import PolicyInvalid, policy_settings_check


class PolicyAdminForm(forms.ModelForm):
    """The same check as the REST API and the dashboard, shown on the form's settings field."""

    class Meta:
        model = Policy
        fields = ["name", "kind", "pool", "settings"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if "settings" in data and data.get("kind"):
            try:
                policy_settings_check(
                    kind=data["kind"], settings=data["settings"], pool=data.get("pool")
                )
            except PolicyInvalid as error:
                for problem in error.errors:
                    self.add_error("settings", f"{problem['field']}: {problem['reason']}")
        return data


class PolicyVersionInline(admin.TabularInline):
    model = PolicyVersion
    extra = 0
    can_delete = False
    fields = ["version", "author", "created_at", "comment", "diff"]
    readonly_fields = ["version", "author", "created_at", "comment", "diff"]
    ordering = ["-version"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Policy)
class PolicyAdmin(admin.ModelAdmin):
    """Saving goes through the services, so admin edits are versioned like API edits."""

    form = PolicyAdminForm
    list_display = ["name", "kind", "pool", "version", "updated_by", "updated_at"]
    list_filter = ["kind", "pool"]
    search_fields = ["name"]
    readonly_fields = ["version", "updated_by", "created_at", "updated_at"]
    inlines = [PolicyVersionInline]

    def save_model(self, request: HttpRequest, obj: Policy, form: Any, change: bool) -> None:
        if not change:
            created = services.policy_create(
                name=obj.name,
                kind=obj.kind,
                pool=obj.pool,
                settings=obj.settings,
                author=request.user,  # type: ignore[arg-type]
            )
            obj.pk = created.pk
            return
        Policy.objects.filter(pk=obj.pk).update(name=obj.name, kind=obj.kind, pool=obj.pool)
        services.policy_update(
            policy_id=obj.pk,
            settings=obj.settings,
            author=request.user,  # type: ignore[arg-type]
            comment="edited in the admin",
        )


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ["policy", "version", "author", "created_at", "comment"]
    list_filter = ["policy", "created_at"]
    search_fields = ["policy__name", "comment"]
    readonly_fields = ["policy", "version", "settings", "diff", "author", "comment", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
