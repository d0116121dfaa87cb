"""Buffers and triggers are edited in the admin for now; the buffer issue adds their API."""

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []
