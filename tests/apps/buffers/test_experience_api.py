"""Experience through the REST API against a real buffer service (ZeroMQ, in this process):
push checked against the schema, gather, sample with the buffer's sampler (PER with priority
updates), stats with fill level and trigger firings; an unreachable service is a 503."""

from __future__ import annotations

from typing import Any

import pytest

from apps.buffers import dataplane
from tests.apps.helpers import error_fields

pytestmark = pytest.mark.django_db

SCHEMA = {
    "obs": {"shape": [2], "dtype": "float32"},
    "action": {"shape": [], "dtype": "int64"},
    "prompt": {"shape": [None], "dtype": "uint16", "max_len": 4},
}


def declare(client: Any, **fields: Any) -> dict[str, Any]:
    body = {"name": "rollout", "schema": SCHEMA, "capacity": 8, **fields}
    response = client.post("/api/v1/buffers/", body, format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


def steps(count: int, start: int = 0) -> dict[str, Any]:
    return {
        "obs": [[float(i), -float(i)] for i in range(start, start + count)],
        "action": list(range(start, start + count)),
        "prompt": [[i] * (i % 4 + 1) for i in range(start, start + count)],
    }


def push(client: Any, buffer_id: int, actor: str, records: Any) -> Any:
    body = {"actor": actor, "records": records}
    return client.post(f"/api/v1/buffers/{buffer_id}/records/", body, format="json")


def test_push_gather_sample_full_batch_and_stats(job_actor, other_actor, buffer_service):
    trigger = {"name": "learn", "kind": "data_key", "params": {"n": 2, "size": 2, "keys": ["obs"]}}
    buffer = declare(job_actor.client, triggers=[trigger])
    server = buffer_service(buffer["id"])
    url = f"/api/v1/buffers/{buffer['id']}"

    first = push(job_actor.client, buffer["id"], "actor0", steps(2))
    assert first.status_code == 201, first.json()
    assert first.json() == {"steps": 2, "firings": 0}
    assert push(job_actor.client, buffer["id"], "actor1", steps(2, 2)).json()["firings"] == 1
    assert server.firings[0]["actors"] == {"actor0": (0, 2), "actor1": (0, 2)}

    # pull what the firing names
    gathered = job_actor.client.post(
        f"{url}/gather/",
        {"slices": {"actor1": [0, 2]}, "keys": ["prompt", "action"]},
        format="json",
    )
    assert gathered.status_code == 200, gathered.json()
    assert gathered.json()["records"] == {"prompt": [[2, 2, 2], [3, 3, 3, 3]], "action": [2, 3]}

    stats = job_actor.client.get(f"{url}/stats/").json()
    assert (stats["held"], stats["capacity"], stats["fill"]) == (4, 8, 0.5)
    assert stats["firings"] == {"learn": 1} and stats["name"] == "rollout"

    with_size = job_actor.client.post(f"{url}/sample/", {"batch_size": 2}, format="json")
    assert set(error_fields(with_size)) == {"batch_size"}
    sample = job_actor.client.post(f"{url}/sample/", {}, format="json")
    assert sample.status_code == 200, sample.json()
    assert sample.json()["records"]["prompt"][3] == [3, 3, 3, 3]
    assert len(sample.json()["slots"]) == 4
    assert sample.json()["records"]["obs"][2] == [2.0, -2.0]
    # another job's key sees nothing
    assert other_actor.client.get(f"{url}/stats/").status_code == 404
    assert push(other_actor.client, buffer["id"], "actor0", steps(1)).status_code == 404


def test_records_that_do_not_fit_are_refused_naming_the_key(job_actor, buffer_service):
    buffer = declare(job_actor.client)
    buffer_service(buffer["id"])
    bad = {
        "obs": [[1.0, 2.0, 3.0]],  # shape
        "action": [1.5],  # float for an integer key
        "prompt": [[1, 2, 3, 4, 5]],  # longer than max_len
        "reward": [1.0],  # not a key
    }
    for key, value in bad.items():
        fields = error_fields(push(job_actor.client, buffer["id"], "a", {key: value}))
        assert set(fields) == {f"records.{key}"}, fields
    ragged = error_fields(push(job_actor.client, buffer["id"], "a", {"obs": [[1.0], [1.0, 2.0]]}))
    assert set(ragged) == {"records.obs"}
    # beyond int64 the JSON parser itself refuses the number, naming where it was
    out_of_range = error_fields(push(job_actor.client, buffer["id"], "a", {"action": [2**70]}))
    assert set(out_of_range) == {"records.action[0]"}
    negative_uint = {"obs": [[1.0, 2.0]], "action": [1], "prompt": [[-1]]}
    assert set(error_fields(push(job_actor.client, buffer["id"], "a", negative_uint))) == {
        "records.prompt"
    }
    mismatch = {"obs": [[1.0, 2.0]], "action": [1, 2]}
    assert set(error_fields(push(job_actor.client, buffer["id"], "a", mismatch))) == {
        "records.action"
    }
    assert set(error_fields(push(job_actor.client, buffer["id"], "a", {}))) == {"records"}
    stats = job_actor.client.get(f"/api/v1/buffers/{buffer['id']}/stats/").json()
    assert stats["steps_written"] == 0


def test_an_on_policy_buffer_over_capacity_refuses_instead_of_dropping(job_actor, buffer_service):
    buffer = declare(job_actor.client, capacity=3)
    buffer_service(buffer["id"])
    assert push(job_actor.client, buffer["id"], "a", steps(3)).status_code == 201
    full = push(job_actor.client, buffer["id"], "b", steps(1))
    assert full.status_code == 409 and set(error_fields(full)) == {"records"}
    url = f"/api/v1/buffers/{buffer['id']}"
    assert len(job_actor.client.post(f"{url}/sample/", {}, format="json").json()["slots"]) == 3
    assert push(job_actor.client, buffer["id"], "b", steps(1)).status_code == 201


def test_prioritised_sampling_and_priority_updates(job_actor, buffer_service):
    buffer = declare(job_actor.client, eviction="fifo", prioritised=True, capacity=16)
    assert (buffer["sync_mode"], buffer["sampler"]) == ("off_policy", "prioritised")
    buffer_service(buffer["id"])
    url = f"/api/v1/buffers/{buffer['id']}"
    assert error_fields(job_actor.client.post(f"{url}/sample/", {}, format="json")) == {
        "batch_size": "required by the prioritised sampler"
    }
    empty = job_actor.client.post(f"{url}/sample/", {"batch_size": 2}, format="json")
    assert empty.status_code == 409 and set(error_fields(empty)) == {"buffer"}

    push(job_actor.client, buffer["id"], "a", steps(4))
    sample = job_actor.client.post(
        f"{url}/sample/", {"batch_size": 4, "keys": ["action"]}, format="json"
    )
    body = sample.json()
    assert sample.status_code == 200, body
    assert set(body) == {"slots", "weights", "records"} and set(body["records"]) == {"action"}
    assert len(body["weights"]) == 4

    # all the priority on one slot: it is what the next sample draws
    slots = [0, 1, 2, 3]
    update = {"slots": slots, "td_errors": [0.0, 0.0, 1000.0, 0.0]}
    assert job_actor.client.post(f"{url}/priorities/", update, format="json").json() == {
        "updated": 4
    }
    again = job_actor.client.post(f"{url}/sample/", {"batch_size": 8}, format="json").json()
    assert again["slots"].count(2) >= 6
    short = {"slots": [0, 1], "td_errors": [1.0]}
    assert set(error_fields(job_actor.client.post(f"{url}/priorities/", short, format="json"))) == {
        "td_errors"
    }
    outside = {"slots": [99], "td_errors": [1.0]}
    assert set(
        error_fields(job_actor.client.post(f"{url}/priorities/", outside, format="json"))
    ) == {"slots"}


def test_a_buffer_the_service_does_not_serve_is_a_conflict(job_actor, buffer_service):
    served = declare(job_actor.client)
    buffer_service(served["id"])
    other = declare(job_actor.client, name="replay")
    response = job_actor.client.get(f"/api/v1/buffers/{other['id']}/stats/")
    assert response.status_code == 409 and set(error_fields(response)) == {"buffer"}


def test_an_unreachable_service_is_a_503_never_a_500(job_actor, monkeypatch):
    buffer = declare(job_actor.client)
    url = f"/api/v1/buffers/{buffer['id']}/stats/"
    monkeypatch.delenv(dataplane.SERVICE_ENV, raising=False)
    unset = job_actor.client.get(url)
    assert unset.status_code == 503 and unset["Retry-After"] == "1"
    assert dataplane.SERVICE_ENV in error_fields(unset)["buffer_service"]

    # a port nothing listens on: ZeroMQ queues the request, the client's timeout ends it
    monkeypatch.setenv(dataplane.SERVICE_ENV, "tcp://127.0.0.1:9")
    monkeypatch.setenv(dataplane.TIMEOUT_ENV, "50")
    try:
        silent = push(job_actor.client, buffer["id"], "a", steps(1))
        assert silent.status_code == 503
        assert "did not answer" in error_fields(silent)["buffer_service"]
    finally:
        for client in dataplane._local.__dict__.pop("clients", {}).values():
            client.close()


STEP_SCHEMA = {
    "obs": {"shape": [1], "dtype": "float32"},
    "reward": {"shape": [], "dtype": "float32"},
    "done": {"shape": [], "dtype": "bool"},
    "next_obs": {"shape": [1], "dtype": "float32"},
}


def transitions(first: int, count: int, done_at: int = -1) -> dict[str, Any]:
    index = range(first, first + count)
    return {
        "obs": [[float(i)] for i in index],
        "reward": [1.0] * count,
        "done": [i == done_at for i in index],
        "next_obs": [[float(i + 1)] for i in index],
    }


def test_n_step_sampling_returns_the_discounted_sums(job_actor, buffer_service):
    buffer = declare(job_actor.client, schema=STEP_SCHEMA, eviction="fifo", sampler="n_step")
    buffer_service(buffer["id"])
    push(job_actor.client, buffer["id"], "a", transitions(0, 4, done_at=1))
    url = f"/api/v1/buffers/{buffer['id']}/sample/"
    body = {
        "batch_size": 16,
        "n": 2,
        "gamma": 0.5,
        "reward_key": "reward",
        "done_key": "done",
        "keys": ["obs"],
        "last_keys": ["next_obs"],
    }
    response = job_actor.client.post(url, body, format="json")
    assert response.status_code == 200, response.json()
    answer = response.json()
    assert set(answer) == {"slots", "records", "n_step"}
    expected = {0: (1.5, 0.0, 2), 1: (1.0, 0.0, 1), 2: (1.5, 0.25, 2), 3: (1.0, 0.5, 1)}
    for row, (obs,) in enumerate(answer["records"]["obs"]):
        total, discount, steps = expected[int(obs)]
        assert answer["n_step"]["returns"][row] == pytest.approx(total)
        assert answer["n_step"]["discounts"][row] == pytest.approx(discount)
        assert answer["n_step"]["steps"][row] == steps
        assert answer["n_step"]["last"]["next_obs"][row] == [obs + steps]


def test_n_step_parameters_missing_or_wrong_are_400_naming_the_field(job_actor, buffer_service):
    buffer = declare(job_actor.client, schema=STEP_SCHEMA, eviction="fifo", sampler="n_step")
    buffer_service(buffer["id"])
    push(job_actor.client, buffer["id"], "a", transitions(0, 2))
    url = f"/api/v1/buffers/{buffer['id']}/sample/"
    good: dict[str, object] = {
        "batch_size": 2,
        "n": 2,
        "gamma": 0.9,
        "reward_key": "reward",
        "done_key": "done",
    }
    cases: list[tuple[dict[str, object], str]] = [
        ({"n": None}, "n"),
        ({"gamma": 1.5}, "gamma"),
        ({"batch_size": None}, "batch_size"),
        ({"reward_key": "nope"}, "reward_key"),
        ({"done_key": "obs"}, "done_key"),
        ({"last_keys": ["nope"]}, "last_keys[0]"),
        ({"actor": "a"}, "actor"),
    ]
    for change, field in cases:
        body = {k: v for k, v in {**good, **change}.items() if v is not None}
        response = job_actor.client.post(url, body, format="json")
        assert response.status_code == 400, (change, response.json())
        assert set(error_fields(response)) == {field}, change


def test_fifo_per_actor_sampling_over_rest_takes_each_step_once_in_order(job_actor, buffer_service):
    buffer = declare(
        job_actor.client, schema=STEP_SCHEMA, eviction="fifo", sampler="fifo_per_actor"
    )
    buffer_service(buffer["id"])
    push(job_actor.client, buffer["id"], "a", transitions(0, 3))
    push(job_actor.client, buffer["id"], "b", transitions(10, 1))
    url = f"/api/v1/buffers/{buffer['id']}/sample/"
    first = job_actor.client.post(url, {"batch_size": 2, "keys": ["obs"]}, format="json")
    assert first.status_code == 200, first.json()
    assert (first.json()["actor"], first.json()["steps"]) == ("a", [0, 1])
    assert first.json()["records"] == {"obs": [[0.0], [1.0]]}
    of_b = job_actor.client.post(url, {"actor": "b"}, format="json").json()
    assert (of_b["actor"], of_b["steps"]) == ("b", [0])
    rest = job_actor.client.post(url, {}, format="json").json()
    assert (rest["actor"], rest["steps"]) == ("a", [2])
    empty = job_actor.client.post(url, {}, format="json")
    assert empty.status_code == 409 and set(error_fields(empty)) == {"buffer"}
    wrong = job_actor.client.post(url, {"n": 3}, format="json")
    assert wrong.status_code == 400 and "n_step" in error_fields(wrong)["n"]


def test_a_malformed_service_address_is_refused_naming_the_variable(monkeypatch):
    from django.core.exceptions import ImproperlyConfigured

    monkeypatch.delenv(dataplane.SERVICE_ENV, raising=False)
    assert dataplane.configured_address() is None
    monkeypatch.setenv(dataplane.SERVICE_ENV, "localhost:5555")
    with pytest.raises(ImproperlyConfigured, match=dataplane.SERVICE_ENV):
        dataplane.configured_address()
    monkeypatch.setenv(dataplane.SERVICE_ENV, "tcp://127.0.0.1:5555")
    monkeypatch.setenv(dataplane.TIMEOUT_ENV, "soon")
    with pytest.raises(ImproperlyConfigured, match=dataplane.TIMEOUT_ENV):
        dataplane.configured_address()
    monkeypatch.setenv(dataplane.TIMEOUT_ENV, "250")
    assert dataplane.configured_address() == "tcp://127.0.0.1:5555"
