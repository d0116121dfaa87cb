"""The embedded mode has no router state stream: the Rollouts page reads the states the
in-process router handed over (priorities, migrations, DARTS group rollouts)."""

from __future__ import annotations

from typing import Any

import pytest

from apps.dashboard import router_stream
from apps.dashboard.router_stream import (
    router_groups,
    router_states_forget,
    router_states_keep,
    router_stream_read,
)
from tests.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_router_yet(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    settings.REDIS_URL = None
    monkeypatch.setattr(router_stream, "_in_process", None)


def test_without_redis_or_an_in_process_router_nothing_is_reported() -> None:
    assert router_stream_read([1]) is None


def test_the_in_process_routers_newest_states_are_read(operator_client: Any) -> None:
    trajectory = TrajectoryFactory.create()
    job = str(trajectory.job_id)
    row_state = {"trajectory": trajectory.pk, "job": job, "priority": 1, "migrations": 0}
    newer = row_state | {"priority": 7, "migrations": 2}
    candidate = {"trajectory": "g1/0/0", "job": job, "status": "generating", "at": 1.0}
    router_states_keep([row_state, candidate])
    router_states_keep([newer, candidate | {"status": "finished", "at": 2.0}])
    view = router_stream_read([trajectory.pk])
    assert view is not None
    assert view.fields == {trajectory.pk: {"priority": 7, "migrations": 2}}
    (group,) = router_groups(view)
    assert (group["group"], group["candidates"], group["finished"]) == ("g1", 1, 1)
    body = operator_client.get("/dashboard/api/rollouts").json()
    assert body["router_fields"] is True
    assert [g["group"] for g in body["router_groups"]] == ["g1"]


def test_a_stopped_router_is_no_longer_read() -> None:
    trajectory = TrajectoryFactory.create()
    router_states_keep([{"trajectory": trajectory.pk, "job": str(trajectory.job_id)}])
    assert router_stream_read([trajectory.pk]) is not None
    router_states_forget()
    assert router_stream_read([trajectory.pk]) is None
