from __future__ import annotations

from typing import Any

from django.apps import AppConfig


class BuffersConfig(AppConfig):
    name = "apps.buffers"
    label = "buffers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_delete, post_save

        from apps.buffers.dataplane import configured_address

        configured_address()  # a malformed LOOM_BUFFER_SERVICE stops start-up, naming it

        from apps.buffers.models import Buffer, Trigger

        # The buffer service's copy of the definitions (apps.buffers.registry).
        post_save.connect(_buffer_saved, sender=Buffer, dispatch_uid="buffer-registry-saved")
        post_delete.connect(_buffer_deleted, sender=Buffer, dispatch_uid="buffer-registry-deleted")
        for signal, uid in ((post_save, "saved"), (post_delete, "deleted")):
            signal.connect(_trigger_changed, sender=Trigger, dispatch_uid=f"trigger-registry-{uid}")


def _buffer_saved(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    from apps.buffers.registry import definition_published

    definition_published(buffer_id=instance.pk, using=using)


def _buffer_deleted(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    from apps.buffers.registry import definition_withdrawn

    definition_withdrawn(service_name=instance.service_name, using=using)


def _trigger_changed(sender: Any, instance: Any, using: str, **kwargs: Any) -> None:
    from apps.buffers.registry import definition_published

    definition_published(buffer_id=instance.buffer_id, using=using)
