"""The embedded mode's buffer service (``apps.embedded.buffers``): the buffers the database
defines are served in-process, records flow through the same API, snapshots are recorded, a
deleted buffer stops being served, and the process's configuration is restored on stop."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from apps.buffers import dataplane
from apps.buffers.experience import buffer_stats, records_push
from apps.buffers.models import BufferSnapshot
from apps.buffers.services import (
    BufferSpec,
    TriggerSpec,
    buffer_create,
    buffer_delete,
    buffer_snapshots_record,
)
from apps.embedded.buffers import EmbeddedBuffers
from tests.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = BufferSpec(
    name="rollouts",
    schema={"reward": {"shape": [], "dtype": "float32"}},
    capacity=16,
    eviction="fifo",
    sampler="uniform",
    sync_mode="off_policy",
    triggers=(TriggerSpec("learn", "data_key", {"n": 1, "size": 2, "keys": ["reward"]}),),
)


@pytest.fixture
def embedded(tmp_path: Path, settings: Any) -> Any:
    settings.VAR_DIR = str(tmp_path)
    for client in dataplane._local.__dict__.pop("clients", {}).values():
        client.close()
    assert dataplane.SERVICE_ENV not in os.environ
    buffers = EmbeddedBuffers()
    yield buffers
    buffers.stop()
    for client in dataplane._local.__dict__.pop("clients", {}).values():
        client.close()
    assert dataplane.SERVICE_ENV not in os.environ  # this process's configuration restored


def test_defined_buffers_are_served_and_recorded(embedded: EmbeddedBuffers) -> None:
    buffer = buffer_create(job=JobFactory.create(), spec=SPEC)
    embedded.start()
    assert os.environ[dataplane.SERVICE_ENV] == embedded.address
    pushed = records_push(buffer=buffer, actor="slot-0", records={"reward": [1.0, 0.5]})
    assert pushed == {"steps": 2, "firings": 1}  # two steps from one actor fire the learner
    stats = buffer_stats(buffer=buffer)
    assert stats["steps_written"] == 2 and stats["firings"] == {"learn": 1}
    assert buffer_snapshots_record(now=timezone.now()) == 1
    assert BufferSnapshot.objects.get(buffer=buffer).steps_written == 2

    buffer_delete(buffer=buffer)
    embedded.sync()
    with pytest.raises(dataplane.BufferServiceRefused):
        buffer_stats(buffer=buffer)  # no longer served
