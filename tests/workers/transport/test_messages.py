"""The wire schema: versioning, validation, {dop} rendering."""

from __future__ import annotations

import json

import pytest

from workers.transport import ActionResult, ApiRequestSpec, Dispatch, MessageError, decode_message
from workers.transport.messages import SCHEMA_VERSION, decode_json, encode_json


def test_dispatch_json_round_trip_and_dop() -> None:
    dispatch = Dispatch(
        action_id="a",
        attempt=1,
        job_id="j",
        kind="cpu",
        trajectory_id="t",
        command="pytest -n {dop} -k 'x{y}'",
        cores=(2, 3, 5),
        memory_mb=512,
        env={"SEED": "1"},
    )
    wire = encode_json(dispatch)
    assert json.loads(wire)["v"] == SCHEMA_VERSION
    assert decode_json(wire) == dispatch
    assert dispatch.rendered_command() == "pytest -n 3 -k 'x{y}'"
    assert dispatch.key == "a:1"


def test_dop_is_at_least_one() -> None:
    dispatch = Dispatch(action_id="a", attempt=1, job_id="j", kind="cpu", command="x -j {dop}")
    assert dispatch.rendered_command() == "x -j 1"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"v": 99}, "schema version"),
        ({"type": "nope"}, "unknown message type"),
        ({"kind": "bogus"}, "kind must be"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"command": None}, "needs a command"),
    ],
)
def test_bad_dispatches_are_rejected(change: dict, message: str) -> None:
    data = Dispatch(action_id="a", attempt=1, job_id="j", kind="cpu", command="true").to_dict()
    data.update(change)
    with pytest.raises(MessageError, match=message):
        decode_message(data)


def test_missing_field_is_named() -> None:
    data = Dispatch(action_id="a", attempt=1, job_id="j", kind="cpu", command="true").to_dict()
    del data["job_id"]
    with pytest.raises(MessageError, match="job_id"):
        decode_message(data)


def test_api_spec_validation() -> None:
    with pytest.raises(MessageError, match="http"):
        ApiRequestSpec("GET", "ftp://x")
    with pytest.raises(MessageError, match="needs an api"):
        Dispatch(action_id="a", attempt=1, job_id="j", kind="api")


def test_result_rejects_unknown_reason_and_status() -> None:
    with pytest.raises(MessageError, match="reason"):
        ActionResult(action_id="a", attempt=1, node_id="n", status="failed", reason="whatever")
    with pytest.raises(MessageError, match="status"):
        ActionResult(action_id="a", attempt=1, node_id="n", status="done")  # type: ignore[arg-type]


def test_not_json() -> None:
    with pytest.raises(MessageError, match="not JSON"):
        decode_json(b"{")
