from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class ResourcesConfig(AppConfig):
    name = "apps.resources"
    label = "resources"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from apps.resources.generation import on_catalog_change
        from apps.resources.models import ApiQuota, ResourcePool, Service, Tool

        for model in (ResourcePool, Tool, Service, ApiQuota):
            post_save.connect(on_catalog_change, sender=model, dispatch_uid=f"catalog-{model}")
            post_delete.connect(on_catalog_change, sender=model, dispatch_uid=f"catalog-d-{model}")
