from django.apps import AppConfig


class PoliciesConfig(AppConfig):
    name = "apps.policies"
    label = "policies"
    default_auto_field = "django.db.models.BigAutoField"
