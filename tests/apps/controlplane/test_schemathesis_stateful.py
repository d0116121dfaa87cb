"""Stateful API fuzzing: chains of submit → get / cancel / result / await over the schema's links.

Schemathesis builds a state machine from the schema's OpenAPI links
(``controlplane.api.schema.ACTION_LINKS``) and Hypothesis drives it: each scenario submits
actions (one or a batch) and follows the links with the ids they answered — cancel, then await,
then cancel again (a 409), and so on. Every response must be no 5xx and conform to the schema
(status code, content type, body).

Generated submissions almost never name a real tool or a satisfiable demand, so chains would
stop at a 400; ``steer`` makes every other submission valid (a small CPU demand in the job of the
calling key) and keeps the rest of what was generated (payload, command, timeouts, idempotency
keys). Long-poll waits are forced to 0: the wait itself is tested elsewhere, and no scheduler
runs here. ``LOOM_STATEFUL_EXAMPLES`` (scenarios) and ``LOOM_STATEFUL_STEPS`` (steps per
scenario) size the run; the test asserts how many calls it made.
"""

from __future__ import annotations

import os
import time
import zlib
from collections import Counter
from typing import Any, ClassVar

import pytest
from django.db import transaction
from hypothesis import HealthCheck, settings

from tests.apps.controlplane.test_schemathesis import CHECKS, schema
from tests.factories import JobFactory, PoolFactory, ToolFactory, make_key

EXAMPLES = int(os.environ.get("LOOM_STATEFUL_EXAMPLES", "200"))
STEPS = int(os.environ.get("LOOM_STATEFUL_STEPS", "32"))
MIN_CALLS = int(os.environ.get("LOOM_STATEFUL_MIN_CALLS", "5000"))

ACTION_OPERATIONS = schema.include(path_regex=r"^/api/v1/actions/")
SUBMIT_KEYS = ("command", "payload", "timeout_s", "single_unit_duration_s", "idempotency_key")


def _valid_item(item: Any, salt: int) -> dict[str, Any]:
    """A submission the API accepts, keeping the generated values of ``SUBMIT_KEYS``."""
    kept = {key: item[key] for key in SUBMIT_KEYS if isinstance(item, dict) and key in item}
    return {**kept, "demand": {"cpu": 1 + salt % 2}}


def steer(case: Any) -> None:
    """Half the submissions valid (chosen by a hash of the generated body, so a run replays),
    and every long-poll answered at once."""
    if isinstance(case.query, dict) and "wait" in case.query:
        case.query["wait"] = 0
    label = case.operation.label
    body = case.body
    salt = zlib.crc32(repr(body).encode())
    if label == "POST /api/v1/actions/await/" and isinstance(body, dict):
        body["wait"] = 0
    elif label == "POST /api/v1/actions/" and salt % 2 == 0:
        case.body = _valid_item(body, salt)
    elif label == "POST /api/v1/actions/batch/" and salt % 2 == 0:
        items = body.get("items") if isinstance(body, dict) else None
        items = items if isinstance(items, list) and items else [{}]
        case.body = {"items": [_valid_item(item, salt) for item in items[:20]]}


class ActionChains(ACTION_OPERATIONS.as_state_machine()):  # type: ignore[misc]
    headers: ClassVar[dict[str, str]] = {}
    calls: ClassVar[Counter[str]] = Counter()

    def setup(self) -> None:
        # Each scenario starts from the same database: Hypothesis replays and extends scenarios,
        # and one that answered 201 must answer 201 again (not 200 for an idempotency key an
        # earlier scenario stored), or its data generation is "flaky" to Hypothesis.
        self.savepoint = transaction.savepoint()

    def teardown(self) -> None:
        transaction.savepoint_rollback(self.savepoint)

    def before_call(self, case: Any) -> None:
        steer(case)

    def get_call_kwargs(self, case: Any) -> dict[str, Any]:
        return {"headers": dict(self.headers)}

    def validate_response(
        self, response: Any, case: Any, additional_checks: Any = None, **kwargs: Any
    ) -> None:
        type(self).calls[f"{case.operation.label} {response.status_code}"] += 1
        case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_submit_cancel_await_chains_never_500_and_match_the_schema(
    db: Any, keep_test_connection: Any
) -> None:
    pool = PoolFactory.create(name="cpu", kind="cpu")
    ToolFactory.create(name="sandbox", pool=pool)
    _, raw = make_key(job=JobFactory.create(name="stateful"))
    ActionChains.headers = {"Authorization": f"Bearer {raw}"}
    ActionChains.calls = Counter()
    started = time.monotonic()
    ActionChains.run(
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )
    elapsed = time.monotonic() - started
    total = sum(ActionChains.calls.values())
    summary = ", ".join(f"{name}: {n}" for name, n in sorted(ActionChains.calls.items()))
    print(f"\nstateful schemathesis: {total} calls in {elapsed:.1f} s ({summary})")
    assert total >= MIN_CALLS, summary
    # The chains really happened: actions were created, then cancelled, awaited and read back.
    for followed in (
        "POST /api/v1/actions/ 201",
        "POST /api/v1/actions/batch/ 201",
        "POST /api/v1/actions/{action_id}/cancel/ 200",
        "POST /api/v1/actions/{action_id}/cancel/ 409",
        "POST /api/v1/actions/await/ 200",
        "GET /api/v1/actions/{action_id}/result/ 200",
        "GET /api/v1/actions/{action_id}/ 200",
    ):
        assert ActionChains.calls[followed] > 0, (followed, summary)
