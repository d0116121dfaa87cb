"""Django app config for the embedded mode (it holds the ``demo`` management command)."""

from django.apps import AppConfig


class EmbeddedConfig(AppConfig):
    name = "apps.embedded"
    label = "embedded"
    verbose_name = "Embedded mode"
