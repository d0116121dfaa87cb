"""``/metrics`` (include at the site root)."""

from django.urls import path

from apps.metrics.views import metrics_view

urlpatterns = [path("metrics", metrics_view, name="metrics")]
