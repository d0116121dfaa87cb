from __future__ import annotations

from typing import Any

from django.apps import AppConfig

from apps.jobs import key_cache, router_keys


class JobsConfig(AppConfig):
    name = "apps.jobs"
    label = "jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth import get_user_model
        from django.db.models.signals import post_delete, post_save

        from apps.jobs.models import ApiKey, Job

        # What a cached key verification depends on: the key, its job and its user
        # (apps.jobs.key_cache). QuerySet.update() sends no signal: writes made that way call
        # key_cache.auth_changed() themselves (services.api_key_revoke).
        for model in (ApiKey, Job, get_user_model()):
            label = model._meta.label
            post_save.connect(_saved, sender=model, dispatch_uid=f"key-cache-saved-{label}")
            post_delete.connect(_deleted, sender=model, dispatch_uid=f"key-cache-deleted-{label}")
        # The LLM router's copy of the job keys (apps.jobs.router_keys).
        post_save.connect(_key_saved, sender=ApiKey, dispatch_uid="router-keys-saved")
        post_delete.connect(_key_deleted, sender=ApiKey, dispatch_uid="router-keys-deleted")


def _saved(sender: Any, created: bool, update_fields: Any, using: str, **kwargs: Any) -> None:
    if created:
        return  # a new row cannot change the answer for a key already verified
    if update_fields is not None and set(update_fields) == {"last_login"}:
        return  # every dashboard login saves this alone
    key_cache.auth_changed(using=using)


def _deleted(sender: Any, using: str, **kwargs: Any) -> None:
    key_cache.auth_changed(using=using)


def _key_saved(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    if instance.revoked_at is None:
        router_keys.router_key_published(api_key=instance, using=using)
    else:
        router_keys.router_key_withdrawn(key_hash=instance.key_hash, using=using)


def _key_deleted(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    router_keys.router_key_withdrawn(key_hash=instance.key_hash, using=using)
