"""What the sync and async clients share: request shapes, response parsing and the retry policy.

The clients only do I/O; everything they decide lives here so the two stay one implementation.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from loom.errors import ApiError, AuthenticationError, NotFoundError
from loom.types import Action

API_PREFIX = "/api/v1"
MAX_WAIT_PER_POLL_S = 30
TRANSIENT_STATUS = frozenset({429, 502, 503, 504})


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter on connection errors and 429/502/503/504.

    Submits are safe to retry because every submit carries an idempotency key.
    """

    attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        if retry_after is not None:
            try:
                return min(float(retry_after), self.max_delay_s)
            except ValueError:
                pass
        return random.uniform(0, min(self.max_delay_s, self.base_delay_s * 2**attempt))


def action_payload(
    *,
    command: str | None = None,
    tool: str | None = None,
    service: str | None = None,
    pool: str | None = None,
    demand: Mapping[str, Any] | None = None,
    elasticity: Mapping[str, Any] | None = None,
    single_unit_duration_s: float | None = None,
    trajectory: int | None = None,
    payload: Mapping[str, Any] | None = None,
    request: Mapping[str, Any] | None = None,
    priority: int | None = None,
    timeout_s: float | None = None,
    idempotency_key: str | None = None,
) -> dict[str, Any]:
    """One action's submit body; unset fields are left out so the server applies its rules.
    ``request``/``priority``: a GPU service action's input and the priority it is served at."""
    body: dict[str, Any] = {"idempotency_key": idempotency_key or uuid.uuid4().hex}
    optional = {
        "command": command,
        "tool": tool,
        "service": service,
        "pool": pool,
        "demand": dict(demand) if demand is not None else None,
        "elasticity": dict(elasticity) if elasticity is not None else None,
        "single_unit_duration_s": single_unit_duration_s,
        "trajectory": trajectory,
        "payload": dict(payload) if payload is not None else None,
        "request": dict(request) if request is not None else None,
        "priority": priority,
        "timeout_s": timeout_s,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def with_idempotency_keys(items: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"idempotency_key": uuid.uuid4().hex, **item} for item in items]


def submit_request(body: dict[str, Any], wait_s: float = 0.0) -> Request:
    """Submit one action; with ``wait_s`` the server answers once it ends or the wait runs out."""
    wait = max(0.0, min(float(MAX_WAIT_PER_POLL_S), wait_s))
    params = {"wait": f"{wait:g}"} if wait > 0 else None
    return Request("POST", f"{API_PREFIX}/actions/", json=body, params=params)


def submit_batch_request(items: list[dict[str, Any]], representation: str = "summary") -> Request:
    """``representation="full"``: each item answered as a single submit is (the whole action)."""
    params = {"representation": representation} if representation != "summary" else None
    return Request("POST", f"{API_PREFIX}/actions/batch/", json={"items": items}, params=params)


def get_request(action_id: int) -> Request:
    return Request("GET", f"{API_PREFIX}/actions/{action_id}/")


def cancel_request(action_id: int) -> Request:
    return Request("POST", f"{API_PREFIX}/actions/{action_id}/cancel/")


def result_request(action_id: int, wait_s: float) -> Request:
    wait = max(0, min(MAX_WAIT_PER_POLL_S, int(wait_s)))
    return Request("GET", f"{API_PREFIX}/actions/{action_id}/result/", params={"wait": wait})


def is_transient(response: httpx.Response) -> bool:
    return response.status_code in TRANSIENT_STATUS


def raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    if response.status_code in (401, 403):
        raise AuthenticationError(response.status_code, body)
    if response.status_code == 404:
        raise NotFoundError(response.status_code, body)
    raise ApiError(response.status_code, body)


def parse_action(response: httpx.Response) -> Action:
    return Action.from_api(response.json())


def parse_actions(response: httpx.Response) -> list[Action]:
    body = response.json()
    items = body["items"] if isinstance(body, dict) else body
    return [Action.from_api(item) for item in items]


def parse_result(response: httpx.Response) -> Action | None:
    """200 → the ended action; 202 → still running after the server-side wait."""
    if response.status_code == 202:
        return None
    return Action.from_api(response.json())


def auth_headers(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}", "Accept": "application/json"}


MAX_AWAIT_IDS = 10_000  # ids per POST /actions/await/ (the server refuses more)


def await_many_request(action_ids: Sequence[int], wait_s: float) -> Request:
    """Long-poll for any of ``action_ids`` to end: the server answers with those that have."""
    if len(action_ids) > MAX_AWAIT_IDS:
        raise ValueError(f"at most {MAX_AWAIT_IDS} ids per await, got {len(action_ids)}")
    wait = max(0, min(MAX_WAIT_PER_POLL_S, int(wait_s)))
    return Request(
        "POST", f"{API_PREFIX}/actions/await/", json={"ids": list(action_ids), "wait": wait}
    )


def parse_await_many(response: httpx.Response) -> list[Action]:
    return [Action.from_api(item) for item in response.json()["ended"]]


def next_pending(pending: list[int], polled: int, ended: Sequence[Action]) -> list[int]:
    """``as_completed``: what is still pending after a poll of ``pending[:polled]``. Those just
    polled go to the back, so beyond ``MAX_AWAIT_IDS`` every id gets its turn in a poll."""
    done = {action.id for action in ended}
    return pending[polled:] + [i for i in pending[:polled] if i not in done]
