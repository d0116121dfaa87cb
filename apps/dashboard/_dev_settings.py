"""PRIVATE to the dashboard helper until the lead wires apps.dashboard / apps.metrics
into controlplane/settings: test settings plus the dashboard's apps, URLs and middleware."""

from controlplane.settings.test import *  # noqa: F403
from controlplane.settings.test import BASE_DIR, INSTALLED_APPS, MIDDLEWARE

INSTALLED_APPS = [*INSTALLED_APPS, "apps.dashboard", "apps.metrics"]
MIDDLEWARE = ["apps.metrics.middleware.RequestMetricsMiddleware", *MIDDLEWARE]
ROOT_URLCONF = "apps.dashboard._dev_urls"
STATICFILES_DIRS = [BASE_DIR / "frontend" / "dist"]
LOGIN_URL = "/login/"
ASGI_APPLICATION = "apps.dashboard._dev_asgi.application"
