from __future__ import annotations

import pytest
from django.db import connection


@pytest.fixture
def postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (row locks, real concurrency); run make test-postgres")
