"""Hard input edges past the REST views: the HTTP bridge's size limit, the dashboard socket's
depth limit, and every integer and number field of every JSON request body (from the schema).

The views' own edges are in ``test_input_edges.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import override_settings

from tests.apps.controlplane.test_input_edges import JSON
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


# --- the HTTP bridge refuses an oversized body before Django (and the disk) sees it -----------


@override_settings(LOOM_MAX_BODY_BYTES=4096)
async def test_the_bridge_stops_reading_past_the_size_limit() -> None:
    from controlplane.http_bridge import WsgiBridge
    from tests.apps.controlplane.test_http_bridge import body_messages, call, http_scope

    ran: list[int] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        ran.append(1)
        start_response("200 OK", [])
        return [b""]

    bridge = WsgiBridge(app, threads=1, spool_bytes=1024)
    chunks = [b"x" * 1024] * 100  # an endless upload, as far as the limit is concerned
    sent = await call(bridge, http_scope(method="POST"), body_messages(*chunks))
    assert sent[0]["status"] == 400 and not ran
    assert json.loads(sent[1]["body"]) == {
        "errors": [{"field": "body", "reason": "larger than the limit of 4096 bytes"}]
    }
    sent = await call(bridge, http_scope(method="POST"), body_messages(b"x" * 4096))
    assert sent[0]["status"] == 200 and ran


@pytest.mark.django_db(transaction=True)
async def test_the_dashboard_socket_answers_a_deep_message_and_stays_open() -> None:
    from asgiref.sync import sync_to_async
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator

    from apps.dashboard.live.routing import websocket_urlpatterns
    from apps.dashboard.roles import OPERATOR_GROUP, roles_ensure
    from tests.factories import UserFactory

    def operator() -> Any:
        user: Any = UserFactory(username="socket-edges")
        user.groups.add(roles_ensure()[OPERATOR_GROUP])
        return type(user).objects.get(pk=user.pk)

    ws = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/")
    ws.scope["user"] = await sync_to_async(operator)()
    connected, _ = await ws.connect()
    assert connected
    await ws.send_to(text_data="[" * 5000 + "]" * 5000)
    answer = await ws.receive_json_from()
    assert answer["op"] == "error" and "nested deeper" in answer["reason"]
    await ws.send_to(text_data='{"op": "ping", "n": 1e400}')
    assert (await ws.receive_json_from())["field"] == "n"
    await ws.send_json_to({"op": "ping"})
    assert await ws.receive_json_from() == {"op": "pong"}
    await ws.disconnect()


# --- every integer and number field of every JSON request body, from the schema ---------------


def _body_fields() -> list[tuple[str, str, str, str]]:
    """(method, path, field, type) of every integer/number property of a JSON request body."""
    from drf_spectacular.generators import SchemaGenerator

    spec = SchemaGenerator().get_schema(request=None, public=True)
    components = spec["components"]["schemas"]
    found = []
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            content = operation.get("requestBody", {}).get("content", {})
            ref = content.get("application/json", {}).get("schema", {}).get("$ref", "")
            properties = components.get(ref.rsplit("/", 1)[-1], {}).get("properties", {})
            for name, prop in properties.items():
                if prop.get("type") in ("integer", "number") and not prop.get("readOnly"):
                    found.append((method.upper(), path, name, prop["type"]))
    return found


def test_every_numeric_body_field_refuses_values_past_its_range(staff_actor: Any) -> None:
    """Past int64 or float range, each field is a 400 naming it (never the database's error,
    never a 5xx), whichever endpoint it belongs to."""
    from tests.factories import ApiQuotaFactory, BufferFactory, ServiceFactory

    pool = PoolFactory.create(name="cpu-range")
    job = JobFactory.create(name="range")
    ids = {
        "job_id": job.pk,
        "action_id": ActionFactory.create(job=job).pk,
        "trajectory_id": TrajectoryFactory.create(job=job).pk,
        "node_id": NodeFactory.create(pool=pool).pk,
        "buffer_id": BufferFactory.create(job=job).pk,
    }
    by_collection = {
        "pools": pool.pk,
        "quotas": ApiQuotaFactory.create(name="q-range").pk,
        "services": ServiceFactory.create(name="s-range").pk,
        "tools": ToolFactory.create(name="t-range").pk,
        "policies": PolicyFactory.create(name="p-range").pk,
    }
    fields = _body_fields()
    assert len(fields) > 30, fields
    for method, path, name, kind in fields:
        url = path.format(**ids, id=by_collection.get(path.split("/")[3], 0))
        for raw in ([2**63, -(2**63) - 1, 10**30] if kind == "integer" else [2**63]) + ["1e400"]:
            body = f'{{"{name}": {raw}}}'.encode()
            response = staff_actor.client.generic(method, url, body, content_type=JSON)
            where = (method, url, name, raw)
            assert response.status_code == 400, (where, response.content[:300])
            assert name in error_fields(response), (where, response.content[:300])
