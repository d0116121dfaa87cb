from django.apps import AppConfig


class BuffersConfig(AppConfig):
    name = "apps.buffers"
    label = "buffers"
    default_auto_field = "django.db.models.BigAutoField"
