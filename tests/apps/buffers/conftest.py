"""A real buffer service (``workers.buffers.service.BufferServer``, ZeroMQ) in this process,
serving the buffers the test declared through the API, as the web tier finds it in production:
through ``LOOM_BUFFER_SERVICE``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from apps.buffers import dataplane
from apps.buffers.models import Buffer
from workers.buffers.definitions import build_trigger
from workers.buffers.passers import DirectPasser
from workers.buffers.schema import Schema
from workers.buffers.service import BufferServer
from workers.buffers.store import ExperienceBuffer


def experience_buffer(row: Buffer, firings: list[dict[str, Any]]) -> ExperienceBuffer:
    """The data plane's buffer for a stored definition, its triggers bound (firings kept)."""
    buffer = ExperienceBuffer(
        row.service_name, Schema(row.schema), row.capacity, row.eviction, row.prioritised
    )
    for trigger in row.triggers.filter(enabled=True):
        built = build_trigger(trigger.kind, trigger.params)
        buffer.bind(trigger.name, built, DirectPasser(firings.append))
    return buffer


@pytest.fixture
def buffer_service(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., BufferServer]]:
    """``serve(*buffer_ids)``: start a buffer service holding those definitions."""
    servers: list[BufferServer] = []

    def serve(*buffer_ids: int) -> BufferServer:
        firings: list[dict[str, Any]] = []
        rows = Buffer.objects.filter(pk__in=buffer_ids).prefetch_related("triggers")
        server = BufferServer([experience_buffer(row, firings) for row in rows]).start()
        server.firings = firings  # type: ignore[attr-defined]
        servers.append(server)
        monkeypatch.setenv(dataplane.SERVICE_ENV, server.address)
        return server

    yield serve
    for server in servers:
        server.stop()
    for client in dataplane._local.__dict__.pop("clients", {}).values():
        client.close()
