"""Assertions shared by the API tests."""

from __future__ import annotations

from typing import Any

from apps.actions import services
from apps.actions.models import ActionStatus


def error_fields(response: Any) -> dict[str, str]:
    """``{field: reason}`` from the API's error shape, asserting the shape on the way."""
    body = response.json()
    assert set(body) == {"errors"}, body
    assert body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "reason"}, error
        assert error["field"] and error["reason"], error
    return {error["field"]: error["reason"] for error in body["errors"]}


def run_to_success(action_id: int, **result: Any) -> None:
    """Walk an action through scheduled → running → succeeded (exit 0), as a scheduler and its
    agent would; ``result`` adds output, score and the like."""
    services.action_mark_scheduled(action_id=action_id, allocation={"cores": [0]})
    services.action_mark_running(action_id=action_id)
    services.action_finish(
        action_id=action_id, status=ActionStatus.SUCCEEDED, exit_code=0, **result
    )
