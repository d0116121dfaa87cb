"""Process-local Prometheus instruments (request metrics, dashboard websocket traffic).

Names follow the Prometheus conventions peers use (``loom_`` prefix, base units, ``_total`` for
counters).
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

HTTP_REQUESTS = Counter(
    "loom_http_requests_total", "HTTP requests served", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "loom_http_request_duration_seconds",
    "Time to serve an HTTP request",
    ["method", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
WS_CONNECTIONS = Gauge("loom_dashboard_websockets", "Open dashboard websockets")
WS_EVENTS = Counter(
    "loom_dashboard_events_sent_total", "Live events forwarded to dashboard websockets"
)
WS_REFUSALS = Counter(
    "loom_dashboard_refusals_total",
    "Dashboard subscriptions or commands refused",
    ["kind"],
)
