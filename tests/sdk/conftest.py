"""The SDK's buffer calls run against the real API and a real buffer service."""

from tests.apps.buffers.conftest import buffer_service

__all__ = ["buffer_service"]
