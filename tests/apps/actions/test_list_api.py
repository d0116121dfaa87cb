from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.actions.models import ActionStatus
from tests.apps.helpers import error_fields
from tests.factories import ActionFactory, NodeFactory, ToolFactory, TrajectoryFactory

pytestmark = pytest.mark.django_db


def ids(response):
    assert response.status_code == 200, response.json()
    return [item["id"] for item in response.json()["results"]]


def test_list_is_scoped_to_the_key_and_newest_first(job_actor, other_actor):
    mine = [ActionFactory.create(job=job_actor.job) for _ in range(3)]
    ActionFactory.create(job=other_actor.job)
    assert ids(job_actor.client.get("/api/v1/actions/")) == [a.pk for a in reversed(mine)]


def test_other_jobs_actions_are_404(job_actor, other_actor):
    foreign = ActionFactory.create(job=other_actor.job)
    for suffix in ("", "cancel/", "result/"):
        method = job_actor.client.post if suffix == "cancel/" else job_actor.client.get
        response = method(f"/api/v1/actions/{foreign.pk}/{suffix}")
        assert response.status_code == 404, suffix
        assert "action_id" in error_fields(response)


def test_filters(job_actor):
    tool = ToolFactory.create(name="grader")
    trajectory = TrajectoryFactory.create(job=job_actor.job)
    old = ActionFactory.create(job=job_actor.job, submitted_at=timezone.now() - timedelta(hours=2))
    by_tool = ActionFactory.create(job=job_actor.job, tool=tool)
    by_trajectory = ActionFactory.create(job=job_actor.job, trajectory=trajectory)
    cancelled = ActionFactory.create(
        job=job_actor.job, status=ActionStatus.CANCELLED, finished_at=timezone.now()
    )
    get = job_actor.client.get
    assert ids(get("/api/v1/actions/", {"tool": "grader"})) == [by_tool.pk]
    assert ids(get("/api/v1/actions/", {"trajectory": trajectory.pk})) == [by_trajectory.pk]
    assert ids(get("/api/v1/actions/", {"status": "cancelled"})) == [cancelled.pk]
    assert set(ids(get("/api/v1/actions/", {"status": "queued,cancelled"}))) == {
        old.pk,
        by_tool.pk,
        by_trajectory.pk,
        cancelled.pk,
    }
    hour_ago = (timezone.now() - timedelta(hours=1)).isoformat()
    assert ids(get("/api/v1/actions/", {"submitted_before": hour_ago})) == [old.pk]
    assert old.pk not in ids(get("/api/v1/actions/", {"submitted_after": hour_ago}))


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "sleeping"}, "status"),
        ({"trajectory": "abc"}, "trajectory"),
        ({"submitted_after": "yesterday"}, "submitted_after"),
        ({"job": "-1"}, "job"),
    ],
)
def test_bad_filters_are_400(job_actor, params, field):
    response = job_actor.client.get("/api/v1/actions/", params)
    assert response.status_code == 400
    assert field in error_fields(response)


def test_cursor_pagination_walks_everything_once(job_actor):
    created = {ActionFactory.create(job=job_actor.job).pk for _ in range(25)}
    seen: list[int] = []
    url = "/api/v1/actions/?page_size=10"
    while url:
        page = job_actor.client.get(url).json()
        seen += [item["id"] for item in page["results"]]
        url = page["next"]
    assert len(seen) == 25 and set(seen) == created


def test_list_query_count_does_not_grow_with_rows(job_actor):
    tool = ToolFactory.create(name="t")
    node = NodeFactory.create()

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert job_actor.client.get("/api/v1/actions/?page_size=100").status_code == 200
        return len(queries.captured_queries)

    ActionFactory.create(job=job_actor.job, tool=tool)
    count_queries()  # the first request also stamps the key's last use
    few = count_queries()
    for _ in range(30):
        ActionFactory.create(
            job=job_actor.job,
            tool=tool,
            node=node,
            status=ActionStatus.RUNNING,
            allocation={"cores": [0]},
            pool=tool.pool,
        )
    assert count_queries() == few


def test_retrieve(job_actor):
    action = ActionFactory.create(job=job_actor.job)
    body = job_actor.client.get(f"/api/v1/actions/{action.pk}/").json()
    assert body["id"] == action.pk and body["status"] == "queued"
    assert body["demand"] == {"cpu": {"min": 1, "max": 4}}
