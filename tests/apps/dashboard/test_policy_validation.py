"""The dashboard's policy edits (websocket command and REST view) go through the same check as
the policies API: every field against every other and the pool's size, 400/errors naming
``settings.<field>``; the form's defaults fit the pool."""

from __future__ import annotations

from typing import Any

import pytest
from channels.db import database_sync_to_async

from tests.apps.dashboard.test_consumer import connect

API = "/dashboard/api"


async def _command(ws: Any, request_id: int, settings: dict[str, Any]) -> dict[str, Any]:
    await ws.send_json_to(
        {
            "op": "command",
            "id": request_id,
            "name": "policy.update",
            "args": {"pool": "cpu", "settings": settings},
        }
    )
    return await ws.receive_json_from()


@pytest.mark.django_db(transaction=True)
async def test_the_socket_refuses_a_policy_that_does_not_fit_the_pool(
    admin_user: Any, cpu_node: Any
) -> None:
    from apps.policies.models import Policy

    ws, _, _ = await connect(admin_user)
    reply = await _command(ws, 1, {"min_dop": 8})  # the pool's only node has 4 cores
    assert reply["ok"] is False
    assert [e["field"] for e in reply["errors"]] == ["settings.min_dop"]
    assert "4" in reply["errors"][0]["reason"]
    reply = await _command(ws, 2, {"min_dop": 2, "max_dop": 1})
    assert reply["errors"] == [{"field": "settings.max_dop", "reason": "must be ≥ min_dop (2)"}]
    reply = await _command(ws, 3, {"algorithm": "fixed-dop", "fixed_dop": 3, "max_dop": 2})
    assert [e["field"] for e in reply["errors"]] == ["settings.fixed_dop"]
    assert not await database_sync_to_async(Policy.objects.exists)()
    reply = await _command(ws, 4, {"min_dop": 2})  # absent max_dop follows the 4-core pool
    assert reply == {"op": "result", "id": 4, "ok": True, "version": 1}
    policy = await database_sync_to_async(Policy.objects.get)()
    assert (policy.settings["min_dop"], policy.settings["max_dop"]) == (2, 4)
    await ws.disconnect()


@pytest.mark.django_db
def test_the_rest_view_and_the_form_defaults_fit_the_pool(admin_client: Any, cpu_node: Any):
    url = f"{API}/policies/cpu"
    before = admin_client.get(f"{API}/policies").json()
    (fresh,) = [p for p in before["pools"] if p["pool"] == "cpu"]
    assert fresh["current"] is None and fresh["defaults"]["max_dop"] == 4  # the form's start
    too_wide = admin_client.post(url, {"settings": {"max_dop": 32}}, format="json")
    assert too_wide.status_code == 400
    assert [e["field"] for e in too_wide.json()["errors"]] == ["settings.max_dop"]
    assert admin_client.post(url, {"settings": {"depth": 3}}, format="json").status_code == 201
    overview = admin_client.get(f"{API}/policies").json()
    (cpu,) = [p for p in overview["pools"] if p["pool"] == "cpu"]
    assert cpu["current"]["settings"]["max_dop"] == 4
    assert {f["name"] for f in overview["fields"]} >= {"min_dop", "max_dop", "estimate_window"}
