"""PRIVATE (see _dev_settings.py): the project's URLs plus the dashboard's and /metrics."""

from django.urls import include, path

from controlplane.urls import urlpatterns as project_urlpatterns

urlpatterns = [
    path("", include("apps.metrics.urls")),
    *[p for p in project_urlpatterns if str(getattr(p, "pattern", "")) != ""],
    path("", include("apps.dashboard.urls")),
]
