"""``ActionsSubmitted`` carrying the new rows' records (the single-action fast path): the wire
form round-trips with and without records, and malformed records are rejected on decode."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import pytest

from workers.scheduler.records import ActionRecord
from workers.transport import ActionsSubmitted, MessageError, decode_message
from workers.transport.messages import decode_json, encode_json


def _record_dict(action_id: int, **fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "action_id": action_id,
        "job_id": 3,
        "kind": "cpu",
        "demand": {"cpu": {"min": 1, "max": 4}, "memory_mb": {"min": 512, "max": 512}},
        "submitted_at": 1_700_000_000.123456,
        "timeout_s": 45.5,
        "tool": "sandbox",
        "command": "pytest -n {dop}",
        "elasticity": {"resource": "cpu", "efficiency": [1.0, 0.9, 0.8, 0.7]},
        "single_unit_duration_s": 2.5,
        "trajectory_id": 11,
        "idempotent": True,
        "env": {"SEED": "7"},
    }
    return asdict(ActionRecord(**(values | fields)))


def test_round_trip_without_records_omits_the_field() -> None:
    message = ActionsSubmitted(action_ids=(1, 2, 3))
    wire = encode_json(message)
    assert "records" not in json.loads(wire)
    decoded = decode_json(wire)
    assert decoded == message
    assert isinstance(decoded, ActionsSubmitted) and decoded.records == ()


def test_round_trip_with_records_rebuilds_the_same_action_records() -> None:
    first, second = _record_dict(5), _record_dict(6, kind="api", command=None)
    second["api_request"] = {"method": "POST", "url": "http://127.0.0.1:9/x", "json": {"q": 1}}
    message = ActionsSubmitted(action_ids=(5, 6, 7), records=(first, second))  # 7: no record
    wire = encode_json(message)
    assert [r["action_id"] for r in json.loads(wire)["records"]] == [5, 6]
    decoded = decode_json(wire)
    assert decoded == message
    assert isinstance(decoded, ActionsSubmitted)
    assert [ActionRecord(**r) for r in decoded.records] == [
        ActionRecord(**first),
        ActionRecord(**second),
    ]


def test_empty_or_null_records_decode_as_no_records() -> None:
    records: list[object] | None
    for records in ([], None):
        data = {"v": 1, "type": "actions_submitted", "action_ids": [1], "records": records}
        decoded = decode_message(data)
        assert isinstance(decoded, ActionsSubmitted) and decoded.records == ()


@pytest.mark.parametrize(
    ("records", "match"),
    [
        ({"action_id": 1}, "list of objects"),  # an object, not a list
        ("1,2", "list of objects"),
        ([1, 2], "list of objects"),
        ([{"action_id": 1}, [2]], "list of objects"),
        ([{"action_id": 99}], "one of action_ids"),  # not announced
        ([{"job_id": 3}], "one of action_ids"),  # no action_id at all
        ([{"action_id": 1}, {"action_id": 4}], "one of action_ids"),
    ],
)
def test_malformed_records_are_rejected(records: object, match: str) -> None:
    data = ActionsSubmitted(action_ids=(1, 2)).to_dict() | {"records": records}
    with pytest.raises(MessageError, match=match):
        decode_message(data)
    with pytest.raises(MessageError, match=match):
        decode_json(json.dumps(data))
