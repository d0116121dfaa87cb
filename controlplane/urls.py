"""Top-level URLs: the admin and the versioned REST API with its schema and docs."""

from django.contrib import admin
from django.http import HttpRequest, JsonResponse
from django.urls import URLPattern, URLResolver, include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


api_v1: list[URLPattern | URLResolver] = [
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    path("redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("", include("apps.jobs.urls")),
    path("", include("apps.actions.urls")),
    path("", include("apps.trajectories.urls")),
    path("", include("apps.resources.urls")),
    path("", include("apps.policies.urls")),
    path("", include("apps.buffers.urls")),
]

urlpatterns = [
    path("healthz", health, name="health"),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    path("", include("apps.metrics.urls")),
    path("", include("apps.dashboard.urls")),  # the dashboard owns "/"
]

handler400 = "controlplane.api.errors.bad_request_view"
handler403 = "controlplane.api.errors.permission_denied_view"
handler404 = "controlplane.api.errors.not_found_view"
handler500 = "controlplane.api.errors.server_error_view"
