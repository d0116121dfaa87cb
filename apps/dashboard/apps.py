"""Django app config for the operator dashboard."""

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    """Registers the role bootstrap (operator / admin groups) after every migrate, and the live
    updates' receivers of what lower apps announce (``apps.core.live``)."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "apps.dashboard"
    label = "dashboard"
    verbose_name = "Operator dashboard"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from apps.dashboard.live.receivers import live_receivers_register
        from apps.dashboard.roles import roles_ensure_after_migrate

        post_migrate.connect(roles_ensure_after_migrate, sender=self)
        live_receivers_register()
