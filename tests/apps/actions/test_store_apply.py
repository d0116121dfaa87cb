"""The scheduler store's one-transaction writes keep the state machine's guards, whether a batch
holds one change (the row statements of the single-action path) or many (set-based on
PostgreSQL): a dispatch moves only queued rows, a finish never overwrites a cancel."""

from __future__ import annotations

import time
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.actions import hot_path, notify, services
from apps.actions.apis import ActionOutputSerializer
from apps.actions.models import Action
from apps.actions.scheduler_store import (
    PROGRESS_IN_NOTICE_CHARS,
    PROGRESS_IN_NOTICE_UP_TO,
    DjangoActionStore,
)
from tests.factories import ActionFactory, NodeFactory, PoolFactory
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


def _scheduled_and_finished(store: DjangoActionStore, count: int, output: str) -> list[Action]:
    pool = PoolFactory.create(name="cpu")
    NodeFactory.create(name="n1", pool=pool)
    actions = [ActionFactory.create(pool=pool) for _ in range(count)]
    stale = [Action.objects.get(pk=a.pk) for a in actions]  # as the waiting request holds it
    now = time.time()
    allocation = {"cores": [1], "units": {"cpu": 1}, "node": "n1"}
    store.apply(scheduled=[ScheduledUpdate(a.pk, 1, "n1", allocation, now) for a in actions])
    store.apply(
        finished=[
            FinishUpdate(a.pk, 1, "failed", now + 1.25, started_at=now + 0.5, exit_code=2,
                         output=output, reason="exit_code_nonzero")
            for a in actions
        ]
    )  # fmt: skip
    return stale


def test_an_end_is_published_with_the_rows_it_committed_and_they_answer_as_a_read_would(
    django_capture_on_commit_callbacks: Any,
) -> None:
    """PostgreSQL: the finishing UPDATE returns the rows; the notice carries them (through the
    wire format) and a waiter renders from them exactly what reading the row renders."""
    published: list[tuple[list[int], notify.Progress | None]] = []
    with mock.patch.object(notify, "get_notifier") as get_notifier:
        get_notifier.return_value.publish.side_effect = lambda ids, rows: published.append(
            notify.decode_notice(notify.encode_notice(ids, rows))
        )
        with django_capture_on_commit_callbacks(execute=True):
            stale = _scheduled_and_finished(DjangoActionStore(), 2, output="out ü\n")
    ids, progress = published[-1]
    assert ids == [a.pk for a in stale]
    if connection.vendor != "postgresql":
        assert progress is None  # SQLite has no set-based writer: waiters read the rows
        return
    assert progress is not None and set(progress) == set(ids)
    for action in stale:
        with CaptureQueriesContext(connection) as queries:
            hot_path.apply_progress(action, progress[action.pk])
            rendered = ActionOutputSerializer.render(action)
        fresh = Action.objects.select_related("node", "pool").get(pk=action.pk)
        assert rendered == ActionOutputSerializer.render(fresh)
        assert [q["sql"] for q in queries.captured_queries if "actions_action" in q["sql"]] == []
        assert (action.status, action.exit_code, action.output) == ("failed", 2, "out ü\n")
        assert action.finished_at == fresh.finished_at and action.node is not None
        assert action.node.name == "n1"


@pytest.mark.parametrize(
    ("count", "output"),
    [(PROGRESS_IN_NOTICE_UP_TO + 1, "x"), (1, "x" * (PROGRESS_IN_NOTICE_CHARS + 1))],
    ids=["many-ends", "long-output"],
)
def test_a_big_end_is_published_by_id_only(
    django_capture_on_commit_callbacks: Any, count: int, output: str
) -> None:
    """Every web process receives every notice: many ends, or long outputs, go as ids and their
    waiters read the rows."""
    with (
        mock.patch.object(notify, "get_notifier") as get_notifier,
        django_capture_on_commit_callbacks(execute=True),
    ):
        stale = _scheduled_and_finished(DjangoActionStore(), count, output=output)
    get_notifier.return_value.publish.assert_called_once_with([a.pk for a in stale], None)
