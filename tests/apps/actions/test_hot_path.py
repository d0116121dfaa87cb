"""The hand-built statements of the single-action hot path (``apps/actions/hot_path.py``) write
and read exactly what the ORM would."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.forms.models import model_to_dict
from django.http import Http404
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from apps.actions import hot_path, notify
from apps.actions.apis import ActionOutputSerializer
from apps.actions.models import Action, ActionStatus
from apps.actions.waiting import catch_up
from tests.apps.helpers import finish, schedule, start
from tests.factories import ActionFactory, JobFactory, NodeFactory, PoolFactory, ToolFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def fields() -> dict[str, Any]:
    """Every column of a submitted action set, JSON ones nested."""
    pool = PoolFactory.create(name="cpus", kind="cpu")
    return {
        "job": JobFactory.create(),
        "tool": ToolFactory.create(name="sandbox", pool=pool),
        "pool": pool,
        "command": "pytest -n {dop}",
        "payload": {"args": [1, "two", None], "nested": {"ok": True}},
        "demand": {"cpu": {"min": 1, "max": 4}, "memory_mb": 512},
        "elasticity": {"kind": "amdahl", "parallel_fraction": 0.9},
        "key_resource": "cpu",
        "min_units": 1,
        "max_units": 4,
        "single_unit_duration_s": 2.5,
        "timeout_s": 30.0,
        "status": ActionStatus.QUEUED,
        "submitted_at": timezone.now(),
        "idempotency_key": "key-1",
    }


def _row(pk: int) -> dict[str, Any]:
    return model_to_dict(Action.objects.get(pk=pk), exclude=["id"])


def test_insert_action_stores_what_save_stores(fields: dict[str, Any]) -> None:
    through_orm = Action(**fields)
    through_orm.save(force_insert=True)
    through_hot_path = Action(**(fields | {"idempotency_key": "key-2"}))
    with CaptureQueriesContext(connection) as queries:
        hot_path.insert_action(through_hot_path)
    assert len(queries.captured_queries) == 1
    assert queries.captured_queries[0]["sql"].upper().startswith("INSERT")
    assert through_hot_path.pk is not None and through_hot_path.pk != through_orm.pk
    assert not through_hot_path._state.adding
    assert _row(through_hot_path.pk) == _row(through_orm.pk) | {"idempotency_key": "key-2"}


def test_insert_action_fills_model_defaults(fields: dict[str, Any]) -> None:
    action = Action(**(fields | {"command": "", "payload": None, "elasticity": None}))
    hot_path.insert_action(action)
    stored = Action.objects.get(pk=action.pk)
    assert (stored.output, stored.error_reason, stored.attempts) == ("", "", 0)
    assert stored.payload is None and stored.command == "" and stored.score is None


def test_insert_action_raises_integrity_error_on_a_taken_key(fields: dict[str, Any]) -> None:
    hot_path.insert_action(Action(**fields))
    with pytest.raises(IntegrityError), transaction.atomic():
        hot_path.insert_action(Action(**fields))
    assert Action.objects.count() == 1


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)  # autocommit, as a request runs
def test_a_lazy_insert_stores_the_same_row_and_leaves_the_session_as_it_was(
    fields: dict[str, Any],
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("commits lazily on PostgreSQL only")
    before = _synchronous_commit()
    eager = Action(**fields)
    hot_path.insert_action(eager)
    lazy = Action(**(fields | {"idempotency_key": "key-2"}))
    with CaptureQueriesContext(connection) as queries:
        hot_path.insert_action(lazy, durable=False)
    assert len(queries.captured_queries) == 1
    assert "synchronous_commit" in queries.captured_queries[0]["sql"]
    assert _row(lazy.pk) == _row(eager.pk) | {"idempotency_key": "key-2"}
    assert _synchronous_commit() == before  # SET LOCAL: that transaction only
    with pytest.raises(IntegrityError):
        hot_path.insert_action(Action(**fields), durable=False)
    assert Action.objects.count() == 2
    hot_path.flush_commits()


def test_inside_a_transaction_an_insert_is_never_lazy(fields: dict[str, Any]) -> None:
    with CaptureQueriesContext(connection) as queries:
        hot_path.insert_action(Action(**fields), durable=False)
        hot_path.flush_commits()  # the transaction's own commit flushes: nothing to do
    assert len(queries.captured_queries) == 1
    assert "synchronous_commit" not in queries.captured_queries[0]["sql"]


def test_refresh_progress_reads_what_changed_with_the_node_by_name() -> None:
    pool = PoolFactory.create(name="cpus", kind="cpu")
    node = NodeFactory.create(name="node-a", pool=pool)
    action = ActionFactory.create(pool=pool)
    stale = Action.objects.get(pk=action.pk)
    started = timezone.now().timestamp()
    assert schedule(action.pk, allocation={"cores": [2, 3], "node": "node-a"}, node=node.name)
    start(action.pk, at=started)
    finish(
        action.pk,
        ActionStatus.FAILED,
        exit_code=3,
        output="boom\n",
        reason="exit_code_nonzero",
        score=0.25,
        started_at=started,
        finished_at=started + 1,
    )
    stale.pool = pool  # named from the catalog, as the submit view does
    with CaptureQueriesContext(connection) as queries:
        hot_path.refresh_progress(stale)
        rendered = ActionOutputSerializer.render(stale)
    assert len(queries.captured_queries) == 1, [q["sql"] for q in queries.captured_queries]
    fresh = Action.objects.select_related("node").get(pk=action.pk)
    assert rendered == ActionOutputSerializer.render(fresh)
    assert rendered["node"] == "node-a" and rendered["allocation"]["cores"] == [2, 3]
    assert (stale.status, stale.exit_code, stale.score) == ("failed", 3, 0.25)
    assert stale.started_at == fresh.started_at and stale.finished_at == fresh.finished_at
    assert stale.node is not None and stale.node.cores == node.cores  # the rest loads on access


def test_refresh_progress_of_an_action_without_a_node() -> None:
    action = ActionFactory.create()
    hot_path.refresh_progress(action)
    assert action.node is None and action.node_id is None and action.status == "queued"


def test_refresh_progress_of_a_deleted_action_raises_and_the_api_says_404() -> None:
    action = ActionFactory.create()
    Action.objects.filter(pk=action.pk).delete()
    with pytest.raises(Action.DoesNotExist):
        hot_path.refresh_progress(action)
    with notify.InProcessNotifier().subscribe(action.pk) as subscription, pytest.raises(Http404):
        catch_up(action, subscription)  # no row published with the end: read back, and gone
