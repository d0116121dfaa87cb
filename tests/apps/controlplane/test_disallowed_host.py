"""A request for a host Loom does not serve names the variable that lists the hosts it does."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.mark.parametrize("path", ["/api/v1/actions/", "/login/"])
def test_a_disallowed_host_names_loom_allowed_hosts(job_actor: Any, path: str) -> None:
    response = job_actor.client.get(path, HTTP_HOST="evil.example")
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["field"] == "Host"
    assert "'evil.example'" in error["reason"]
    assert "LOOM_ALLOWED_HOSTS" in error["reason"]
