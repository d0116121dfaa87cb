"""Django app config for metrics."""

from django.apps import AppConfig


class MetricsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "apps.metrics"
    label = "metrics"
    verbose_name = "Metrics and rollups"
