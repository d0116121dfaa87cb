"""Fixtures of the in-process API fuzzers (schemathesis calls the WSGI app itself)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections


@pytest.fixture
def keep_test_connection() -> Iterator[None]:
    """Calling the WSGI app directly fires request_finished, which would close the connection
    holding the test's transaction; Django's own test client disconnects it the same way."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)
