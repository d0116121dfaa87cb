"""The scheduler's store replaces a connection that a database error left broken."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection

from apps.actions.scheduler_store import DjangoActionStore
from tests.factories import PoolFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_broken_connection_fails_one_call_and_the_next_reconnects(postgres_only: None) -> None:
    PoolFactory.create(name="cpu")
    store = DjangoActionStore()
    assert store.load_policy("cpu") is None
    connection.connection.close()  # the server went away under this thread's connection
    with pytest.raises(DatabaseError):
        store.load_active("cpu")
    assert connection.connection is None  # closed by the store: the next call takes a new one
    assert store.load_active("cpu") == []
    assert store.pool_kind("cpu") == "cpu"
