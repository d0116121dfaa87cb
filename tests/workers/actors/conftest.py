"""Fixtures of the elastic-actor tests."""

from __future__ import annotations

import pytest

from tests.workers.actors.programs import SCHEMA_FIELDS
from workers.buffers.schema import Schema
from workers.buffers.service import BufferServer
from workers.buffers.store import ExperienceBuffer


@pytest.fixture
def served(tmp_path, monkeypatch):
    """A buffer served over ZeroMQ for the test programs' actors to deliver into."""
    buffer = ExperienceBuffer(
        "rollout", Schema(SCHEMA_FIELDS), capacity=256, eviction="keep_unsampled"
    )
    with BufferServer([buffer]) as server:
        monkeypatch.setenv("LOOM_TEST_DIR", str(tmp_path))
        monkeypatch.setenv("LOOM_TEST_BUFFER", server.address)
        yield buffer, server.address
