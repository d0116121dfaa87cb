"""The scheduler store's one-transaction writes keep the state machine's guards, whether a batch
holds one change (the row statements of the single-action path) or many (set-based on
PostgreSQL): a dispatch moves only queued rows, a finish never overwrites a cancel."""

from __future__ import annotations

import time

import pytest

from apps.actions import services
from apps.actions.models import Action
from apps.actions.scheduler_store import DjangoActionStore
from tests.factories import ActionFactory, PoolFactory
from workers.scheduler.records import FinishUpdate, ScheduledUpdate

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("size", [1, 3])
def test_a_dispatch_moves_only_queued_rows_and_a_finish_never_overwrites_a_cancel(
    size: int,
) -> None:
    pool = PoolFactory.create(name="cpu")
    actions = [ActionFactory.create(pool=pool) for _ in range(size)]
    cancelled = ActionFactory.create(pool=pool)
    services.action_cancel(action_id=cancelled.pk, reason="changed my mind")
    store = DjangoActionStore()
    now = time.time()
    allocation = {"cores": [0], "units": {"cpu": 1}, "node": "n1"}
    moved = store.apply(
        scheduled=[ScheduledUpdate(a.pk, 1, "n1", allocation, now) for a in actions]
    )
    assert moved.scheduled == {a.pk for a in actions}
    assert (
        store.apply(scheduled=[ScheduledUpdate(cancelled.pk, 1, "n1", allocation, now)]).scheduled
        == frozenset()
    )
    ended = store.apply(
        finished=[
            FinishUpdate(
                a.pk, 1, "succeeded", now + 1, started_at=now, exit_code=0, output=f"o{a.pk}"
            )
            for a in actions
        ]
    )
    assert ended.ended == tuple(a.pk for a in actions)
    store.apply(finished=[FinishUpdate(cancelled.pk, 1, "failed", now + 1, reason="late")])
    for action in actions:
        action.refresh_from_db()
        assert (action.status, action.attempts, action.allocation) == ("succeeded", 1, allocation)
        assert (action.exit_code, action.output) == (0, f"o{action.pk}")
        assert action.started_at is not None and action.scheduled_at is not None
        assert action.finished_at is not None and action.finished_at > action.started_at
    cancelled.refresh_from_db()
    assert (cancelled.status, cancelled.error_reason) == ("cancelled", "changed my mind")
    assert Action.objects.filter(status="scheduled").count() == 0
