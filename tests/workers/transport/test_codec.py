"""The wire codec writes what the hand-written encoders wrote, byte for byte.

``wire_v1.json`` holds the wire form of representative messages of every type, captured from the
hand-written ``to_dict``s before they gave way to the codec (``workers/transport/codec.py``).
Each message must encode to exactly that string and decode back to itself; decoding keeps the
readers' old leniency (absent fields take their defaults, null collections read as empty) and
its strictness (every value that does not convert is a ``MessageError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from workers.transport.codec import MessageError, WireRecord, plan_for
from workers.transport.messages import (
    _BY_TYPE,
    ActionResult,
    ActionsCancelled,
    ActionsSubmitted,
    ApiRequestSpec,
    Cancel,
    Dispatch,
    Heartbeat,
    Message,
    NodeRegister,
    TrajectoryEnd,
    decode_json,
    decode_message,
    encode_json,
)

WIRE_V1: dict[str, str] = json.loads((Path(__file__).parent / "wire_v1.json").read_text())

API = ApiRequestSpec(
    method="post",
    url="https://api.example/v1",
    headers={"X-Key": "k"},
    json_body={"q": [1, 2], "n": None},
    timeout_s=12.5,
)
RECORD = {
    "action_id": 5,
    "job_id": 3,
    "kind": "cpu",
    "demand": {"cpu": {"min": 1, "max": 4}},
    "submitted_at": 1700000000.123456,
    "env": {},
}
MESSAGES: dict[str, Message] = {
    "dispatch_cpu": Dispatch(
        action_id="41",
        attempt=2,
        job_id="7",
        kind="cpu",
        trajectory_id="t-3",
        command="pytest -n {dop}",
        cores=(4, 5, 6),
        memory_mb=2048,
        timeout_s=90.0,
        env={"SEED": "1", "LANG": "C"},
        retry_on_redelivery=True,
        end_trajectory=True,
        dispatched_at=1700000000.25,
        network=True,
    ),
    "dispatch_api": Dispatch(
        action_id="42", attempt=1, job_id="7", kind="api", api=API, timeout_s=30.0
    ),
    "dispatch_noop": Dispatch(action_id="43", attempt=1, job_id="8", kind="noop"),
    "cancel_attempt": Cancel(action_id="41", attempt=2),
    "cancel_any_attempt": Cancel(action_id="41"),
    "cancel_reason": Cancel(action_id="44", attempt=1, reason="timeout"),
    "trajectory_end": TrajectoryEnd(trajectory_id="t-3"),
    "result_failed": ActionResult(
        action_id="41",
        attempt=2,
        node_id="n1",
        status="failed",
        exit_code=3,
        output="boom\n",
        output_truncated=True,
        reason="exit_code_nonzero",
        started_at=1700000001.5,
        finished_at=1700000002.75,
        cores=(4, 5),
        trajectory_id="t-3",
    ),
    "result_api": ActionResult(
        action_id="42",
        attempt=1,
        node_id="n2",
        status="succeeded",
        http_status=200,
        output='{"ok":true}',
    ),
    "register_cpu": NodeRegister(
        node_id="n1",
        pool="cpu",
        agent_id="agent-1",
        kind="cpu",
        backend="local",
        cores=(0, 1, 2, 3),
        numa={0: (0, 1), 1: (2, 3)},
        memory_mb=4096,
        dispatch_stream="loom:dispatch:n1",
        started_at=1700000000.0,
    ),
    "register_api": NodeRegister(
        node_id="n2", pool="api", agent_id="agent-2", kind="api", backend="http", concurrency=16
    ),
    "heartbeat_running": Heartbeat(
        node_id="n1", pool="cpu", agent_id="agent-1", sent_at=1700000003.0, running=("41:2", "43:1")
    ),
    "heartbeat_idle": Heartbeat(node_id="n1", pool="cpu", agent_id="agent-1", sent_at=1700000003.0),
    "submitted": ActionsSubmitted(action_ids=(1, 2, 3)),
    "submitted_with_records": ActionsSubmitted(action_ids=(5, 6), records=(RECORD,)),
    "cancelled": ActionsCancelled(action_ids=(9, 10)),
}


def test_every_message_type_has_a_captured_wire_form() -> None:
    assert set(MESSAGES) == set(WIRE_V1)
    assert {type(message) for message in MESSAGES.values()} == set(_BY_TYPE.values())


@pytest.mark.parametrize("name", sorted(WIRE_V1))
def test_encoding_is_the_v1_wire_form_byte_for_byte(name: str) -> None:
    message = MESSAGES[name]
    assert encode_json(message) == WIRE_V1[name]
    # The dict itself, as the in-process transport keeps it: lists, not tuples; string keys.
    data = message.to_dict()
    assert data == json.loads(WIRE_V1[name])
    assert list(data) == list(json.loads(WIRE_V1[name]))


@pytest.mark.parametrize("name", sorted(WIRE_V1))
def test_the_v1_wire_form_decodes_to_the_message(name: str) -> None:
    assert decode_json(WIRE_V1[name]) == MESSAGES[name]
    assert decode_message(MESSAGES[name].to_dict()) == MESSAGES[name]


def test_an_encoded_dict_is_the_readers_own() -> None:
    """Containers are copied: changing a decoded-from dict never changes the frozen message."""
    message = MESSAGES["dispatch_cpu"]
    assert isinstance(message, Dispatch)
    data = message.to_dict()
    data["env"]["SEED"] = "2"
    data["cores"].append(7)
    assert message.env == {"SEED": "1", "LANG": "C"} and message.cores == (4, 5, 6)


def _without(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key not in keys}


def test_absent_fields_take_their_defaults_and_nulls_read_as_empty() -> None:
    minimal = {"v": 1, "type": "dispatch", "action_id": 4, "attempt": "2", "job_id": 9}
    decoded = decode_message(minimal | {"kind": "noop", "timeout_s": "5", "cores": None})
    assert decoded == Dispatch(action_id="4", attempt=2, job_id="9", kind="noop", timeout_s=5.0)
    register = decode_message(
        _without(MESSAGES["register_cpu"].to_dict(), "memory_mb") | {"numa": {"0": ["0", 1]}}
    )
    assert isinstance(register, NodeRegister)
    assert register.numa == {0: (0, 1)} and register.memory_mb == 0
    # An empty nested object is no object at all (a noop dispatch without an api request).
    noop = MESSAGES["dispatch_noop"].to_dict() | {"api": {}}
    assert decode_message(noop) == MESSAGES["dispatch_noop"]


def test_optional_text_is_taken_as_it_is() -> None:
    """A cpu dispatch whose command is not text is refused, never run as the text of a list."""
    data = MESSAGES["dispatch_cpu"].to_dict() | {"command": []}
    with pytest.raises(MessageError, match="needs a command"):
        decode_message(data)


@pytest.mark.parametrize(
    ("name", "change", "match"),
    [
        ("dispatch_cpu", {"timeout_s": None}, "invalid dispatch"),
        ("dispatch_cpu", {"env": ["SEED"]}, "invalid dispatch"),
        ("dispatch_api", {"api": {"method": "GET"}}, "field 'url' is missing"),
        ("result_failed", {"attempt": None}, "invalid action_result"),
        ("register_cpu", {"numa": {"x": [0]}}, "invalid node_register"),
        ("heartbeat_running", {"running": 3}, "invalid heartbeat"),
        ("cancel_attempt", {"attempt": "two"}, "invalid cancel"),
        ("submitted", {"action_ids": (1, 2)}, "must be a list"),
    ],
)
def test_a_value_that_does_not_convert_is_a_message_error(
    name: str, change: dict[str, Any], match: str
) -> None:
    with pytest.raises(MessageError, match=match):
        decode_message(MESSAGES[name].to_dict() | change)


def test_timeout_is_required_on_the_wire_though_it_has_a_default() -> None:
    with pytest.raises(MessageError, match="field 'timeout_s' is missing"):
        decode_message(_without(MESSAGES["dispatch_noop"].to_dict(), "timeout_s"))


def test_a_hint_the_codec_cannot_handle_fails_when_the_plan_is_made() -> None:
    @dataclass(frozen=True)
    class Unsupported(WireRecord):
        members: set[int]

    with pytest.raises(TypeError, match="no plan"):
        plan_for(Unsupported)
