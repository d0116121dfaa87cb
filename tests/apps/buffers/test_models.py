from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from tests.factories import BufferFactory, TriggerFactory

pytestmark = pytest.mark.django_db


def test_buffer_names_are_unique_per_job_and_capacity_positive():
    buffer = BufferFactory.create(name="rollouts")
    BufferFactory.create(name="rollouts")  # another job may reuse the name
    with pytest.raises(IntegrityError), transaction.atomic():
        BufferFactory.create(job=buffer.job, name="rollouts")
    with pytest.raises(IntegrityError), transaction.atomic():
        BufferFactory.create(capacity=0)


def test_trigger_names_are_unique_per_buffer():
    trigger = TriggerFactory.create(name="every-5s")
    with pytest.raises(IntegrityError), transaction.atomic():
        TriggerFactory.create(buffer=trigger.buffer, name="every-5s")
    assert str(trigger).endswith(":every-5s")
