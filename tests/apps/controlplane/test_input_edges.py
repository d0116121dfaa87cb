"""Hard input edges: no request body, header or query string gets a 5xx or an HTML page.

Body limits (``controlplane.api.limits``) on every parse path, numbers past int64 or float range,
unknown query parameters, and the JSON error shape with ``DEBUG`` on and off
(``controlplane.api.middleware``, ``controlplane.api.errors``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from apps.actions import selectors
from apps.actions.models import Action, ActionStatus
from controlplane.api.limits import JsonRejected, parse_json_body
from tests.apps.helpers import error_fields
from tests.factories import (
    ActionFactory,
    JobFactory,
    NodeFactory,
    PolicyFactory,
    PoolFactory,
    ToolFactory,
    TrajectoryFactory,
)

pytestmark = pytest.mark.django_db

DEMAND = {"cpu": 1}
JSON = "application/json"
DEPTH = 64  # settings.LOOM_MAX_JSON_DEPTH's default


def post_raw(client: Any, url: str, raw: bytes, content_type: str = "application/json") -> Any:
    return client.generic("POST", url, raw, content_type=content_type)


def nested(depth: int) -> Any:
    """A value of ``depth`` levels of arrays and objects (1: a flat list)."""
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def assert_json_error(response: Any, status: int) -> dict[str, str]:
    assert response.status_code == status, response.content[:300]
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    return error_fields(response)


@pytest.fixture
def pool() -> Any:
    return PoolFactory.create(name="cpu")


# --- depth ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/actions/",
        "/api/v1/actions/batch/",
        "/api/v1/actions/await/",
        "/api/v1/trajectories/",
    ],
)
@pytest.mark.parametrize("debug", [False, True])
def test_thousands_of_levels_are_a_400_naming_body(job_actor: Any, url: str, debug: bool) -> None:
    raw = b"[" * 5000 + b"]" * 5000
    with override_settings(DEBUG=debug):
        errors = assert_json_error(post_raw(job_actor.client, url, raw), 400)
    assert f"nested deeper than the limit of {DEPTH} levels" in errors["body"]


def test_deep_payload_inside_a_valid_action(job_actor: Any, pool: Any) -> None:
    too_deep = {"command": "true", "demand": DEMAND, "payload": nested(DEPTH)}
    response = job_actor.client.post("/api/v1/actions/", too_deep, format="json")
    errors = assert_json_error(response, 400)
    assert "nested deeper" in errors["body"]
    deep_enough = {"command": "true", "demand": DEMAND, "payload": nested(DEPTH - 2)}
    response = job_actor.client.post("/api/v1/actions/", deep_enough, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["payload"] == nested(DEPTH - 2)


# --- size and encoding ------------------------------------------------------------------------


@override_settings(LOOM_MAX_BODY_BYTES=2048)
def test_body_over_the_size_limit_is_a_400_naming_body(job_actor: Any, pool: Any) -> None:
    big = json.dumps({"command": "x" * 3000, "demand": DEMAND}).encode()
    errors = assert_json_error(post_raw(job_actor.client, "/api/v1/actions/", big), 400)
    assert errors == {"body": "larger than the limit of 2048 bytes"}
    small = json.dumps({"command": "x" * 100, "demand": DEMAND}).encode()
    assert post_raw(job_actor.client, "/api/v1/actions/", small).status_code == 201


@pytest.mark.parametrize(
    "raw",
    [
        b'{"command": "\xff\xfe", "demand": {"cpu": 1}}',
        b'{"command": "\xc3", "demand": {"cpu": 1}}',  # a truncated sequence
        b'\xef\xbb\xbf{"demand": {"cpu": 1}}',  # UTF-16 BOM bytes are not JSON either
        '{"command": "é"}'.encode("latin-1"),
    ],
)
def test_invalid_utf8_is_a_400_naming_body(job_actor: Any, raw: bytes) -> None:
    errors = assert_json_error(post_raw(job_actor.client, "/api/v1/actions/", raw), 400)
    assert set(errors) == {"body"}


def test_charset_does_not_change_the_decoding(job_actor: Any, pool: Any) -> None:
    raw = '{"command": "é", "demand": {"cpu": 1}}'.encode()
    response = post_raw(
        job_actor.client, "/api/v1/actions/", raw, "application/json; charset=latin-1"
    )
    assert response.status_code == 201 and response.json()["command"] == "é"


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"command": "a\\u0000b", "demand": {"cpu": 1}}', "command"),
        (b'{"payload": {"x": "\\ud800"}, "demand": {"cpu": 1}}', "payload.x"),
        (b"", None),
        (b"{", "body"),
        (b"not json", "body"),
    ],
)
def test_malformed_bodies_name_where(job_actor: Any, pool: Any, raw: bytes, field: str) -> None:
    response = post_raw(job_actor.client, "/api/v1/actions/", raw)
    if field is None:  # an empty body is an empty object: the action's fields are missing
        assert response.status_code == 400
        return
    assert field in assert_json_error(response, 400)


# --- numbers ----------------------------------------------------------------------------------

INT64_MAX = 2**63 - 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"payload": {"seed": 2**63}}, "payload.seed"),
        ({"payload": {"seed": -(2**63) - 1}}, "payload.seed"),
        ({"payload": [0, [1, 10**30]]}, "payload[1][1]"),
        ({"trajectory": 2**63}, "trajectory"),
        ({"demand": {"cpu": 2**64}}, "demand.cpu"),
        ({"timeout_s": 10**400}, "timeout_s"),
    ],
)
def test_integers_past_int64_are_a_400_naming_the_field(
    job_actor: Any, pool: Any, body: dict[str, Any], field: str
) -> None:
    response = job_actor.client.post(
        "/api/v1/actions/", {"command": "true", "demand": DEMAND, **body}, format="json"
    )
    errors = assert_json_error(response, 400)
    assert field in errors, errors


def test_int64_bounds_themselves_are_stored(job_actor: Any, pool: Any) -> None:
    payload = {"max": INT64_MAX, "min": -(2**63)}
    response = job_actor.client.post(
        "/api/v1/actions/", {"command": "true", "demand": DEMAND, "payload": payload}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert Action.objects.get(pk=response.json()["id"]).payload == payload


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"demand": {"cpu": 1}, "payload": {"x": 1e400}}', "payload.x"),
        (b'{"demand": {"cpu": 1}, "payload": {"x": -1e400}}', "payload.x"),
        (b'{"demand": {"cpu": 1}, "payload": {"x": NaN}}', "payload.x"),
        (b'{"demand": {"cpu": 1}, "payload": [Infinity]}', "payload[0]"),
        (b'{"demand": {"cpu": 1}, "timeout_s": 1e400}', "timeout_s"),
        (b'{"demand": {"cpu": 1}, "timeout_s": "nan"}', "timeout_s"),
        (b'{"demand": {"cpu": 1}, "single_unit_duration_s": "-inf"}', "single_unit_duration_s"),
        (b'{"items": [{"demand": {"cpu": 1}, "payload": {"v": [NaN]}}]}', "items[0].payload.v[0]"),
    ],
)
def test_floats_out_of_range_are_a_400_naming_the_field(
    job_actor: Any, pool: Any, raw: bytes, field: str
) -> None:
    url = "/api/v1/actions/batch/" if raw.startswith(b'{"items"') else "/api/v1/actions/"
    errors = assert_json_error(post_raw(job_actor.client, url, raw), 400)
    assert field in errors, errors


@pytest.mark.parametrize(
    ("url", "field"),
    [
        (f"/api/v1/actions/?job={2**63}", "job"),
        (f"/api/v1/trajectories/?training_step={2**40}", "training_step"),
        ("/api/v1/actions/1/result/?wait=inf", "wait"),
        ("/api/v1/actions/1/result/?wait=1e400", "wait"),
        ("/api/v1/actions/1/result/?wait=nan", "wait"),
    ],
)
def test_query_numbers_out_of_range_are_a_400(job_actor: Any, url: str, field: str) -> None:
    ActionFactory.create(pk=1, job=job_actor.job)
    assert field in assert_json_error(job_actor.client.get(url), 400)


def test_ids_past_int64_in_paths_and_bodies(job_actor: Any) -> None:
    assert_json_error(job_actor.client.get(f"/api/v1/actions/{2**64}/"), 404)
    assert_json_error(job_actor.client.get(f"/api/v1/trajectories/{2**64}/"), 404)
    response = job_actor.client.post("/api/v1/actions/await/", {"ids": [2**63]}, format="json")
    assert "ids[0]" in assert_json_error(response, 400)


def test_trajectory_progress_numbers(job_actor: Any) -> None:
    trajectory = TrajectoryFactory.create(job=job_actor.job)
    url = f"/api/v1/trajectories/{trajectory.pk}/"
    for body, field in [
        (b'{"reward": 1e400}', "reward"),
        (b'{"reward": NaN}', "reward"),
        (b'{"predicted_remaining_tokens": 99999999999999999999999}', "predicted_remaining_tokens"),
    ]:
        response = job_actor.client.generic("PATCH", url, body, content_type="application/json")
        assert field in assert_json_error(response, 400), body


# --- headers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_huge_and_odd_headers(job_actor: Any, debug: bool) -> None:
    huge = "x" * 1_000_000
    with override_settings(DEBUG=debug):
        client = APIClient()
        errors = assert_json_error(
            client.get("/api/v1/actions/", HTTP_AUTHORIZATION=f"Bearer {huge}"), 401
        )
        assert "Authorization" in errors
        assert job_actor.client.get("/api/v1/actions/", HTTP_X_PADDING=huge).status_code == 200
        response = job_actor.client.get("/api/v1/actions/", HTTP_ACCEPT=f"text/{huge}")
        assert_json_error(response, 406)
        response = post_raw(job_actor.client, "/api/v1/actions/", b"{}", f"application/{huge}")
        assert "Content-Type" in assert_json_error(response, 415)
        errors = assert_json_error(job_actor.client.get("/api/v1/actions/", HTTP_HOST=huge), 400)
        assert "Host" in errors
        response = job_actor.client.get("/api/v1/actions/", HTTP_HOST="evil.example")
        assert "Host" in assert_json_error(response, 400)


def test_too_many_query_fields_is_a_400(job_actor: Any) -> None:
    query = "&".join(f"f{i}=1" for i in range(1500))
    errors = assert_json_error(job_actor.client.get(f"/api/v1/actions/?{query}"), 400)
    assert "query" in errors


# --- query parameters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/actions/",
        "/api/v1/trajectories/",
        "/api/v1/jobs/",
        "/api/v1/pools/",
        "/api/v1/tools/",
        "/api/v1/services/",
        "/api/v1/quotas/",
        "/api/v1/nodes/",
        "/api/v1/policies/",
    ],
)
def test_unknown_query_parameters_on_lists_are_a_400_naming_them(
    staff_actor: Any, url: str
) -> None:
    errors = assert_json_error(staff_actor.client.get(f"{url}?stauts=failed"), 400)
    assert set(errors) == {"stauts"} and "unknown query parameter" in errors["stauts"]
    for valid in ("page_size=5", "format=json"):
        assert staff_actor.client.get(f"{url}?{valid}").status_code == 200, valid


def test_filters_pagination_and_long_poll_parameters_stay_valid(job_actor: Any, pool: Any) -> None:
    client = job_actor.client
    for _ in range(3):
        ActionFactory.create(job=job_actor.job)
    page = client.get("/api/v1/actions/?status=queued&page_size=2&job=" + str(job_actor.job.pk))
    assert page.status_code == 200 and len(page.json()["results"]) == 2
    assert client.get(page.json()["next"]).status_code == 200  # its cursor
    action_id = page.json()["results"][0]["id"]
    assert client.get(f"/api/v1/actions/{action_id}/result/?wait=0").status_code == 202
    assert client.get(f"/api/v1/actions/{action_id}/result?wait=0").status_code == 202
    response = client.post("/api/v1/actions/?wait=0", {"demand": DEMAND}, format="json")
    assert response.status_code == 201
    batch = {"items": [{"demand": DEMAND}]}
    response = client.post("/api/v1/actions/batch/?representation=full", batch, format="json")
    assert response.status_code == 201 and "command" in response.json()["items"][0]
    errors = assert_json_error(client.post("/api/v1/actions/?wiat=1", batch, format="json"), 400)
    assert set(errors) == {"wiat"}
    errors = assert_json_error(client.get(f"/api/v1/actions/{action_id}/?wait=1"), 400)
    assert set(errors) == {"wait"}
    response = client.post("/api/v1/actions/batch/?representation=full&x=1", batch, format="json")
    assert set(assert_json_error(response, 400)) == {"x"}
    assert client.get("/api/v1/trajectories/?status=pending&group_id=g").status_code == 200


def test_dashboard_action_filters_are_checked_too(staff_session: Any) -> None:
    job = JobFactory.create()
    url = f"/dashboard/api/jobs/{job.pk}/actions"
    assert staff_session.client.get(f"{url}?status=queued&limit=5").status_code == 200
    assert set(assert_json_error(staff_session.client.get(f"{url}?stat=queued"), 400)) == {"stat"}


def test_schema_endpoint_keeps_its_own_parameters(staff_actor: Any) -> None:
    assert staff_actor.client.get("/api/v1/schema/?format=json&lang=en").status_code == 200


# --- JSON errors whatever DEBUG says ----------------------------------------------------------


@pytest.mark.parametrize("debug", [False, True])
def test_an_unexpected_exception_is_a_logged_json_500(
    job_actor: Any, monkeypatch: Any, caplog: Any, debug: bool
) -> None:
    def broken(**kwargs: Any) -> Any:
        raise RuntimeError("secret detail in the traceback")

    monkeypatch.setattr(selectors, "action_list", broken)
    with override_settings(DEBUG=debug), caplog.at_level(logging.ERROR, "django.request"):
        response = job_actor.client.get("/api/v1/actions/")
    errors = assert_json_error(response, 500)
    assert errors == {"server": "internal error; see the server log"}
    assert b"secret detail" not in response.content
    [logged] = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert logged.exc_info and "secret detail" in str(logged.exc_info[1])  # once, with its cause


@pytest.mark.parametrize("debug", [False, True])
def test_an_exception_outside_the_view_is_a_json_500(
    job_actor: Any, monkeypatch: Any, debug: bool
) -> None:
    from apps.metrics import middleware

    def broken(*args: Any) -> None:
        raise RuntimeError("metrics broke")

    monkeypatch.setattr(middleware, "_record", broken)
    client = APIClient(raise_request_exception=False)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {job_actor.raw_key}")
    with override_settings(DEBUG=debug):
        response = client.get("/api/v1/actions/")
    assert assert_json_error(response, 500) == {"server": "internal error; see the server log"}
    assert b"metrics broke" not in response.content


@pytest.mark.parametrize("debug", [False, True])
def test_unknown_api_urls_and_methods_are_json(job_actor: Any, debug: bool) -> None:
    with override_settings(DEBUG=debug):
        assert "path" in assert_json_error(job_actor.client.get("/api/v1/nope/"), 404)
        assert "path" in assert_json_error(job_actor.client.get("/dashboard/api/nope"), 404)
        response = job_actor.client.delete("/api/v1/actions/")
        assert "method" in assert_json_error(response, 405)
        response = job_actor.client.post("/api/v1/actions", {"demand": DEMAND}, format="json")
        assert "end in /" in assert_json_error(response, 404)["path"]


def test_pages_outside_the_api_keep_their_html(staff_session: Any) -> None:
    response = staff_session.client.get("/admin/login/")
    assert response["Content-Type"].startswith("text/html")


def test_the_demo_settings_serve_json_errors_to_api_clients() -> None:
    """``manage.py demo`` runs with ``controlplane.settings.dev`` (DEBUG on): its middleware
    stack is the one that makes every API error JSON."""
    from controlplane.settings import base, dev

    assert dev.DEBUG is True
    assert dev.MIDDLEWARE[0] == "controlplane.api.middleware.ApiErrorsMiddleware"
    assert dev.MIDDLEWARE == base.MIDDLEWARE


# --- the node an ended action ran on ----------------------------------------------------------


def test_ended_action_names_its_node_even_when_the_node_row_is_gone(job_actor: Any) -> None:
    node = NodeFactory.create(name="node-a")
    action = ActionFactory.create(
        job=job_actor.job,
        status=ActionStatus.SUCCEEDED,
        allocation={"node": "node-a", "cores": [0]},
        node=node,
        finished_at=timezone.now(),
    )
    for url in (f"/api/v1/actions/{action.pk}/", "/api/v1/actions/"):
        body = job_actor.client.get(url).json()
        rendered = body if "id" in body else body["results"][0]
        assert rendered["node"] == "node-a", url
    node.delete()  # SET_NULL on the action's foreign key
    assert job_actor.client.get(f"/api/v1/actions/{action.pk}/").json()["node"] == "node-a"


def test_node_from_the_foreign_key_when_the_allocation_does_not_name_it(job_actor: Any) -> None:
    node = NodeFactory.create(name="node-b")
    action = ActionFactory.create(
        job=job_actor.job,
        status=ActionStatus.FAILED,
        allocation={"cores": [0]},
        node=node,
        finished_at=timezone.now(),
    )
    assert job_actor.client.get(f"/api/v1/actions/{action.pk}/").json()["node"] == "node-b"
    queued = ActionFactory.create(job=job_actor.job)
    assert job_actor.client.get(f"/api/v1/actions/{queued.pk}/").json()["node"] is None


# --- one function for every parse path ---------------------------------------------------------


def test_the_websocket_and_the_rest_api_share_the_limits() -> None:
    for raw in ("[" * 5000 + "]" * 5000, b"\xff", '{"x": 1e400}', f'{{"x": {2**63}}}'):
        with pytest.raises(JsonRejected):
            parse_json_body(raw)
    assert parse_json_body('{"op": "ping"}') == {"op": "ping"}


def test_policy_settings_with_numbers_past_range(staff_actor: Any) -> None:
    policy = PolicyFactory.create(name="p-edges")
    url = f"/api/v1/policies/{policy.pk}/"
    response = staff_actor.client.generic(
        "PATCH", url, b'{"settings": {"alpha": 1e400}}', content_type="application/json"
    )
    assert "settings.alpha" in assert_json_error(response, 400)


def test_tool_fields_past_range(staff_actor: Any) -> None:
    PoolFactory.create(name="cpu2")
    ToolFactory.create(name="t-edges")
    for raw in (
        b'{"name": "t1", "timeout_s": 1e400}',
        b'{"name": "t1", "timeout_s": "nan"}',
        b'{"name": "t1", "resource_template": {"cpu": 99999999999999999999}}',
    ):
        response = post_raw(staff_actor.client, "/api/v1/tools/", raw)
        assert response.status_code == 400, (raw, response.content)
        assert response["Content-Type"].startswith("application/json")
