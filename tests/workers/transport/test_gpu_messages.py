"""The GPU fields of the wire messages (arl-tangram §5.3): they round-trip, and are left out of
the wire form when empty, so every cpu/api message keeps its v1 encoding byte for byte."""

from __future__ import annotations

import pytest

from workers.transport.messages import (
    ActionResult,
    Dispatch,
    Heartbeat,
    MessageError,
    NodeRegister,
    decode_json,
    encode_json,
)


def test_a_gpu_dispatch_round_trips_and_names_its_chunk() -> None:
    dispatch = Dispatch(
        action_id="7", attempt=1, job_id="j", kind="gpu", gpus=(2, 3), service="rm",
        request={"input_ids": [[1, 2, 3]]}, priority=4, timeout_s=30,
    )  # fmt: skip
    assert decode_json(encode_json(dispatch)) == dispatch
    assert dispatch.dop == 2


def test_a_gpu_dispatch_needs_a_service_and_gpus() -> None:
    with pytest.raises(MessageError, match="service and its gpus"):
        Dispatch(action_id="7", attempt=1, job_id="j", kind="gpu", gpus=(0,), timeout_s=30)


def test_gpu_registration_result_and_heartbeat_round_trip() -> None:
    cache = ({"service": "rm", "start": 0, "size": 1, "last_used": 5.0},)
    register = NodeRegister(
        node_id="g0", pool="gpu", agent_id="a", kind="gpu", backend="torch", gpus=(0, 1, 2, 3),
        gpu_memory_mb=80_000, nvlink_groups=((0, 1), (2, 3)),
        services={"rm": {"weights_mb": 1.5, "sizes": [1, 2]}}, cache=cache,
    )  # fmt: skip
    result = ActionResult(
        action_id="7", attempt=1, node_id="g0", status="succeeded", gpus=(0,),
        timings={"queue_s": 0.0, "restore_s": 0.2, "execute_s": 0.1},
        cache_events=({"kind": "restore", "service": "rm", "start": 0, "size": 1},),
    )  # fmt: skip
    heartbeat = Heartbeat(node_id="g0", pool="gpu", agent_id="a", sent_at=1.0, cache=cache)
    for message in (register, result, heartbeat):
        assert decode_json(encode_json(message)) == message


def test_empty_gpu_fields_stay_off_the_wire() -> None:
    cpu = Dispatch(action_id="1", attempt=1, job_id="j", kind="cpu", command="true", timeout_s=1)
    encoded = encode_json(cpu)
    for key in ("gpus", "service", "request", "priority"):
        assert f'"{key}"' not in encoded
    result = ActionResult(action_id="1", attempt=1, node_id="n", status="succeeded")
    assert "timings" not in encode_json(result) and "cache_events" not in encode_json(result)


def test_a_heartbeat_tells_an_empty_cache_from_none() -> None:
    none = Heartbeat(node_id="c0", pool="cpu", agent_id="a", sent_at=1.0)
    empty = Heartbeat(node_id="g0", pool="gpu", agent_id="a", sent_at=1.0, cache=())
    assert '"cache"' not in encode_json(none) and decode_json(encode_json(none)) == none
    assert '"cache":[]' in encode_json(empty).replace(" ", "")
    assert decode_json(encode_json(empty)) == empty
