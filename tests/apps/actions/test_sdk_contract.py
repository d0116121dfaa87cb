"""The Python SDK (sdk/loom) against this API, in-process: the shapes both sides agree on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from loom import Client

from controlplane.wsgi import application
from tests.apps.helpers import run_to_success
from tests.factories import ToolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def sdk(job_actor: Any) -> Iterator[Client]:
    # Calling the WSGI app directly would close the test's connection at request end.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    client = Client(
        "http://testserver", job_actor.raw_key, transport=httpx.WSGITransport(app=application)
    )
    yield client
    client.close()
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def test_submit_batch_get_cancel_and_results(sdk: Client) -> None:
    ToolFactory.create(name="sandbox")
    one = sdk.submit(tool="sandbox", demand={"cpu": {"min": 1, "max": 2}}, command="true")
    assert one.status == "queued" and one.tool == "sandbox"
    batch = sdk.submit_batch([{"demand": {"cpu": 1}, "command": f"echo {i}"} for i in range(5)])
    assert [action.status for action in batch] == ["queued"] * 5
    assert sdk.get(batch[0].id).id == batch[0].id

    cancelled = sdk.cancel(batch[0].id)
    assert cancelled.status == "cancelled" and cancelled.done
    assert sdk.result(batch[0].id, timeout=5).status == "cancelled"

    run_to_success(one.id, output="ok", score=1.0)
    finished = sdk.result(one.id, timeout=5)
    assert (finished.status, finished.exit_code, finished.output) == ("succeeded", 0, "ok")
    ended = list(sdk.as_completed([one.id, batch[0].id], timeout=5))
    assert {action.id for action in ended} == {one.id, batch[0].id}


def test_run_returns_the_action_once_it_has_ended(sdk: Client) -> None:
    """``run()`` submits with ``?wait=`` and, for an action still active when that wait ends,
    long-polls the rest of its timeout; here nothing runs it, so it ends by timing out."""
    from loom.errors import ResultTimeout

    requests: list[httpx.Request] = []
    sdk._http.event_hooks["request"].append(requests.append)
    with pytest.raises(ResultTimeout):
        sdk.run(command="true", demand={"cpu": 1}, timeout=1.2)
    submit = requests[0]
    assert submit.method == "POST" and submit.url.params["wait"] == "1.2"
    assert all("/result/" in str(r.url) for r in requests[1:])


def test_a_service_action_carries_its_request_and_priority(sdk: Client) -> None:
    from loom.errors import ApiError

    from apps.actions.models import Action
    from apps.resources.models import PoolKind
    from tests.factories import PoolFactory, ServiceFactory

    pool = PoolFactory.create(name="gpu-sdk", kind=PoolKind.GPU)
    ServiceFactory.create(name="rm-sdk", pool=pool, max_sequences=2, max_tokens=8)
    request = {"input_ids": [[1, 2, 3]]}
    action = sdk.submit(service="rm-sdk", request=request, priority=7)
    stored = Action.objects.get(pk=action.id)
    assert (stored.request, stored.priority) == (request, 7)
    with pytest.raises(ApiError) as refused:
        sdk.submit(service="rm-sdk", request={"input_ids": [[1] * 9]})  # past max_tokens
    assert refused.value.errors[0]["field"].startswith("request.input_ids")
