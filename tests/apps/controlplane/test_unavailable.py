"""A backing service that cannot be reached is a 503 the client retries, never a 500."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.db import InterfaceError, OperationalError

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("error", "service"),
    [
        (OperationalError("connection to server at 127.0.0.1 failed"), "database"),
        (InterfaceError("connection already closed"), "database"),
        (redis.ConnectionError("Error 111 connecting to 127.0.0.1:6379"), "Redis"),
        (redis.TimeoutError("Timeout reading from socket"), "Redis"),
        (ValueError("a bug"), None),
    ],
)
def test_which_errors_mean_a_service_is_away(error: Exception, service: str | None) -> None:
    from controlplane.api.errors import unavailable_service

    assert unavailable_service(error) == service


@pytest.mark.parametrize(
    "error",
    [OperationalError("server closed the connection"), redis.ConnectionError("refused")],
)
def test_submit_during_an_outage_is_503_with_retry_after(
    job_actor: Any, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    from apps.actions import selectors

    def away(**_: Any) -> Any:
        raise error

    monkeypatch.setattr(selectors, "submit_catalog", away)
    response = job_actor.client.post(
        "/api/v1/actions/", {"command": "true", "demand": {"cpu": 1}}, format="json"
    )
    assert response.status_code == 503
    assert response["Retry-After"] == "1"
    [problem] = response.json()["errors"]
    assert problem["field"] == "server" and "unavailable" in problem["reason"]
