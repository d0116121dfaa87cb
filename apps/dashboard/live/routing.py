"""Websocket routes of the dashboard: the multiplexed consumer at ``/ws/``."""

from django.urls import URLPattern, URLResolver, path

from apps.dashboard.live.consumer import DashboardConsumer

websocket_urlpatterns: list[URLPattern | URLResolver] = [
    path("ws/", DashboardConsumer.as_asgi(), name="dashboard-ws"),
]
