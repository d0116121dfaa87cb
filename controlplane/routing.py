"""Websocket routes: the dashboard's one multiplexed consumer at ``/ws/``."""

from django.urls import URLPattern, URLResolver

from apps.dashboard.live.routing import websocket_urlpatterns as dashboard_routes

websocket_urlpatterns: list[URLPattern | URLResolver] = [*dashboard_routes]
