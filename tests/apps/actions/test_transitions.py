"""State transitions as conditional updates (the scheduler's store, the cancel services), and the
database constraints behind them."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import IntegrityError, close_old_connections, connection, transaction

from apps.actions import services
from apps.actions.models import Action, ActionStatus
from apps.actions.scheduler_store import DjangoActionStore
from tests.apps.helpers import error_fields, finish, schedule, start
from tests.factories import ActionFactory, NodeFactory
from workers.scheduler.records import RequeueUpdate, ScheduledUpdate

pytestmark = pytest.mark.django_db


def test_happy_path_queued_to_succeeded():
    action = ActionFactory.create()
    node = NodeFactory.create()
    now = time.time()
    assert schedule(action.pk, allocation={"cores": [0, 1]}, node=node.name, at=now)
    start(action.pk, at=now + 1)
    finish(action.pk, exit_code=0, output="ok", score=1.0, started_at=now + 1, finished_at=now + 2)
    action.refresh_from_db()
    assert action.status == ActionStatus.SUCCEEDED
    assert action.attempts == 1 and action.node == node  # counted when scheduled
    assert action.scheduled_at and action.started_at and action.finished_at
    assert action.submitted_at <= action.scheduled_at <= action.started_at <= action.finished_at


def test_transitions_refuse_the_wrong_state():
    action = ActionFactory.create()
    start(action.pk)  # not scheduled yet
    action.refresh_from_db()
    assert action.status == ActionStatus.QUEUED and action.started_at is None
    assert services.action_cancel(action_id=action.pk)
    assert not services.action_cancel(action_id=action.pk)
    assert not schedule(action.pk)
    finish(action.pk, ActionStatus.FAILED, reason="late")
    action.refresh_from_db()
    assert (action.status, action.error_reason) == ("cancelled", "cancelled by the user")


def test_requeue_drops_the_allocation():
    action = ActionFactory.create()
    schedule(action.pk, allocation={"cores": [3]})
    DjangoActionStore().apply(requeued=[RequeueUpdate(action.pk, "evicted")])
    action.refresh_from_db()
    assert action.status == ActionStatus.QUEUED and action.allocation is None
    assert (action.error_reason, action.attempts) == ("evicted", 1)


def test_bulk_schedule_and_cancel():
    first, second, third = ActionFactory.create(), ActionFactory.create(), ActionFactory.create()
    services.action_cancel(action_id=third.pk)
    now = time.time()
    moved = DjangoActionStore().apply(
        scheduled=[
            ScheduledUpdate(first.pk, 1, "", {"cores": [0]}, now),
            ScheduledUpdate(third.pk, 1, "", {"cores": [1]}, now),
        ]
    )
    assert moved.scheduled == {first.pk}
    cancelled = services.action_cancel_many(
        action_ids=[first.pk, second.pk, third.pk], reason="job stopped"
    )
    assert sorted(cancelled) == [first.pk, second.pk]


@pytest.mark.parametrize(
    ("changes", "constraint"),
    [
        ({"min_units": 5, "max_units": 2}, "action_min_le_max"),
        ({"min_units": -1}, ""),
        ({"status": ActionStatus.RUNNING, "allocation": None}, "allocated"),
        ({"status": ActionStatus.QUEUED, "allocation": {"cores": [0]}}, "queued_has_no"),
        ({"status": ActionStatus.SUCCEEDED, "finished_at": None}, "finished_when_terminal"),
    ],
)
def test_database_constraints(changes, constraint):
    action = ActionFactory.create()
    with pytest.raises(IntegrityError), transaction.atomic():
        Action.objects.filter(pk=action.pk).update(**changes)


def test_unique_idempotency_key_per_job():
    action = ActionFactory.create(idempotency_key="k")
    with pytest.raises(IntegrityError), transaction.atomic():
        ActionFactory.create(job=action.job, idempotency_key="k")
    ActionFactory.create(idempotency_key="k")  # another job may reuse it


def test_cancel_api(job_actor):
    action = ActionFactory.create(job=job_actor.job)
    response = job_actor.client.post(
        f"/api/v1/actions/{action.pk}/cancel/", {"reason": "not needed"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["status"] == "cancelled"
    assert response.json()["error_reason"] == "not needed"
    again = job_actor.client.post(f"/api/v1/actions/{action.pk}/cancel/")
    assert again.status_code == 409
    assert "already cancelled" in error_fields(again)["status"]


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_schedulers_exactly_one_places(postgres_only):
    """Two schedulers race to place one queued action on PostgreSQL: exactly one wins."""
    for _ in range(20):
        action = ActionFactory.create()
        barrier = threading.Barrier(2)
        outcomes: list[bool] = []
        lock = threading.Lock()

        def place(
            action_id: int = action.pk,
            gate: threading.Barrier = barrier,
            results: list[bool] = outcomes,
            results_lock: threading.Lock = lock,
        ) -> None:
            try:
                gate.wait()
                won = schedule(action_id)
                with results_lock:
                    results.append(won)
            finally:
                close_old_connections()
                connection.close()

        threads = [threading.Thread(target=place) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == [False, True]
        action.refresh_from_db()
        assert action.attempts == 1 and action.status == ActionStatus.SCHEDULED


@pytest.mark.django_db(transaction=True)
def test_concurrent_submits_with_one_idempotency_key_make_one_action(postgres_only):
    """Two trainers' retries race with the same key: the unique constraint and one retry
    make both get the same action, and only one row exists."""
    from apps.core.demand import parse_demand
    from tests.factories import JobFactory

    job = JobFactory.create()
    spec = services.ActionSpec(demand=parse_demand({"cpu": 1}), idempotency_key="retry-me")
    barrier = threading.Barrier(2)
    results: list[services.Submitted] = []
    lock = threading.Lock()

    def submit() -> None:
        try:
            barrier.wait()
            submitted = services.action_submit(job=job, spec=spec)
            with lock:
                results.append(submitted)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2
    assert results[0].action.pk == results[1].action.pk
    assert sorted(entry.created for entry in results) == [False, True]
    assert Action.objects.filter(job=job).count() == 1
