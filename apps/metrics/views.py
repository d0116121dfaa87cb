"""``GET /metrics``: Prometheus text format (process metrics + pool metrics from the database)."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from apps.metrics.prometheus import PoolMetricsCollector

_pool_registry = CollectorRegistry(auto_describe=False)
_pool_registry.register(PoolMetricsCollector())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Scrape endpoint; with ``LOOM_METRICS_TOKEN`` set, it requires ``Bearer <token>``."""
    token = getattr(settings, "LOOM_METRICS_TOKEN", "")
    if token:
        supplied = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(supplied.encode(), token.encode()):
            return HttpResponse("metrics token required\n", status=401, content_type="text/plain")
    body = generate_latest(REGISTRY) + generate_latest(_pool_registry)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
