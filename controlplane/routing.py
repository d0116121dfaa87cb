"""Websocket routes. The dashboard issue adds its multiplexed consumer at ``/ws/`` here."""

from django.urls import URLPattern, URLResolver

websocket_urlpatterns: list[URLPattern | URLResolver] = []
