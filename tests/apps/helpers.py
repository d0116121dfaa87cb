"""Assertions shared by the API tests, and the scheduler's writes played through its store."""

from __future__ import annotations

import time
from typing import Any

from apps.actions.scheduler_store import DjangoActionStore
from workers.scheduler.records import FinishUpdate, ScheduledUpdate


def error_fields(response: Any) -> dict[str, str]:
    """``{field: reason}`` from the API's error shape, asserting the shape on the way."""
    body = response.json()
    assert set(body) == {"errors"}, body
    assert body["errors"], body
    for error in body["errors"]:
        assert set(error) == {"field", "reason"}, error
        assert error["field"] and error["reason"], error
    return {error["field"]: error["reason"] for error in body["errors"]}


def schedule(
    action_id: int,
    *,
    allocation: dict[str, Any] | None = None,
    node: str = "",
    attempt: int = 1,
    at: float | None = None,
) -> bool:
    """queued → scheduled through the scheduler's store, as the scheduler writes it; True if it
    moved. ``node``: a node's name (none when no node has it)."""
    update = ScheduledUpdate(
        action_id,
        attempt,
        node,
        allocation or {"cores": [0]},
        at if at is not None else time.time(),
    )
    return action_id in DjangoActionStore().apply(scheduled=[update]).scheduled


def start(action_id: int, *, at: float | None = None) -> None:
    """scheduled → running, as the store writes an agent's first heartbeat for it."""
    DjangoActionStore().mark_running([action_id], at if at is not None else time.time())


def finish(action_id: int, status: str = "succeeded", **result: Any) -> None:
    """An end through the store, as the scheduler writes an agent's result (``result``:
    ``FinishUpdate``'s fields, the score among them)."""
    result.setdefault("finished_at", time.time())
    DjangoActionStore().apply(finished=[FinishUpdate(action_id, 1, status, **result)])


def run_to_success(action_id: int, **result: Any) -> None:
    """Walk an action through scheduled → running → succeeded (exit 0), as a scheduler and its
    agent would; ``result`` adds output, score and the like."""
    started = time.time()
    schedule(action_id, at=started)
    start(action_id, at=started)
    finish(action_id, exit_code=0, started_at=started, **result)
