"""The multiplexed /ws/ consumer: auth, permission-checked subscriptions, pause, commands."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from apps.dashboard.live.broadcast import apublish
from apps.dashboard.live.consumer import CLOSE_FORBIDDEN, CLOSE_UNAUTHENTICATED
from apps.dashboard.live.routing import websocket_urlpatterns

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def no_db_snapshots(settings: Any) -> None:
    """Only the events a test publishes itself (the publisher has its own test below)."""
    settings.LOOM_DASHBOARD_DB_SNAPSHOTS = False


async def connect(user: Any) -> tuple[WebsocketCommunicator, bool, int | None]:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), "/ws/")
    communicator.scope["user"] = user
    connected, code = await communicator.connect()
    return communicator, connected, code


async def test_anonymous_and_roleless_users_are_refused(roleless_user: Any) -> None:
    _, connected, code = await connect(AnonymousUser())
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)
    _, connected, code = await connect(roleless_user)
    assert (connected, code) == (False, CLOSE_FORBIDDEN)


async def test_operator_subscribes_receives_events_and_pause_stops_them(
    operator_user: Any, cpu_pool: Any
) -> None:
    ws, connected, _ = await connect(operator_user)
    assert connected
    await ws.send_json_to({"op": "subscribe", "group": "pool:cpu"})
    assert await ws.receive_json_from() == {"op": "subscribed", "group": "pool:cpu"}
    await apublish("pool:cpu", {"waiting": 5})
    assert await ws.receive_json_from() == {
        "op": "event",
        "group": "pool:cpu",
        "data": {"waiting": 5},
    }
    await ws.send_json_to({"op": "pause"})
    assert await ws.receive_json_from() == {"op": "paused"}
    await apublish("pool:cpu", {"waiting": 6})
    assert await ws.receive_nothing(timeout=0.1)
    await ws.send_json_to({"op": "resume"})
    assert await ws.receive_json_from() == {"op": "resumed"}
    await apublish("pool:cpu", {"waiting": 7})
    assert (await ws.receive_json_from())["data"] == {"waiting": 7}
    await ws.send_json_to({"op": "unsubscribe", "group": "pool:cpu"})
    assert await ws.receive_json_from() == {"op": "unsubscribed", "group": "pool:cpu"}
    await apublish("pool:cpu", {"waiting": 8})
    assert await ws.receive_nothing(timeout=0.1)
    await ws.disconnect()


async def test_unknown_objects_and_malformed_topics_are_refused(
    operator_user: Any, job: Any
) -> None:
    ws, _, _ = await connect(operator_user)
    await ws.send_json_to({"op": "subscribe", "group": "pool:nope"})
    assert await ws.receive_json_from() == {
        "op": "error",
        "group": "pool:nope",
        "reason": "not found: pool:nope",
    }
    await ws.send_json_to({"op": "subscribe", "group": "job:x"})
    assert "positive integer" in (await ws.receive_json_from())["reason"]
    await ws.send_json_to({"op": "subscribe", "group": f"job:{job.pk}"})
    assert await ws.receive_json_from() == {"op": "subscribed", "group": f"job:{job.pk}"}
    await ws.send_json_to({"op": "frobnicate"})
    assert (await ws.receive_json_from())["reason"] == "unknown op 'frobnicate'"
    await ws.disconnect()


async def test_read_only_operator_cannot_change_a_policy_over_the_socket(
    operator_user: Any, cpu_pool: Any
) -> None:
    from apps.policies.models import Policy

    ws, _, _ = await connect(operator_user)
    command = {"name": "policy.update", "args": {"pool": "cpu", "settings": {"depth": 3}}}
    await ws.send_json_to({"op": "command", "id": 1, **command})
    reply = await ws.receive_json_from()
    assert reply["op"] == "result" and reply["id"] == 1 and reply["ok"] is False
    assert reply["reason"].startswith("forbidden")
    assert not await database_sync_to_async(Policy.objects.exists)()
    await ws.disconnect()


async def test_admin_changes_a_policy_over_the_socket_and_bad_values_name_the_field(
    admin_user: Any, cpu_pool: Any
) -> None:
    ws, _, _ = await connect(admin_user)
    await ws.send_json_to(
        {
            "op": "command",
            "id": 2,
            "name": "policy.update",
            "args": {"pool": "cpu", "settings": {"depth": 99}},
        }
    )
    reply = await ws.receive_json_from()
    assert reply["ok"] is False
    assert reply["errors"] == [{"field": "settings.depth", "reason": "must be ≤ 16"}]
    await ws.send_json_to(
        {
            "op": "command",
            "id": 3,
            "name": "policy.update",
            "args": {"pool": "cpu", "settings": {"depth": 3}},
        }
    )
    reply = await ws.receive_json_from()
    assert reply == {"op": "result", "id": 3, "ok": True, "version": 1}
    await ws.disconnect()


async def test_watched_topics_get_database_snapshots_while_a_socket_is_open(
    operator_user: Any, cpu_pool: Any, job: Any, settings: Any
) -> None:
    from apps.dashboard.live.watched_topics import live_publisher
    from tests.factories import ActionFactory

    settings.LOOM_DASHBOARD_DB_SNAPSHOTS = True
    settings.LOOM_DASHBOARD_SNAPSHOT_INTERVAL_S = 0.05
    await database_sync_to_async(ActionFactory.create_batch)(2, job=job, pool=cpu_pool)
    ws, _, _ = await connect(operator_user)
    await ws.send_json_to({"op": "subscribe", "group": "pool:cpu"})
    assert (await ws.receive_json_from())["op"] == "subscribed"
    event = await ws.receive_json_from(timeout=3)
    assert event["group"] == "pool:cpu"
    assert (event["data"]["pool"], event["data"]["waiting"]) == ("cpu", 2)
    assert live_publisher.watched  # the topic is watched while subscribed
    await ws.disconnect()
    assert not live_publisher.watched and live_publisher.sockets == 0
