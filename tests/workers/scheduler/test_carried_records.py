"""The single-action fast path, scheduler side: a submission that carries its record is queued
without reading the store; a malformed record falls back to the store; a rebuilding scheduler
never trusts records (an action that ended is not run again); an action whose row is no longer
queued is never dispatched and frees its units. And ``new_action_record`` (what the web process
carries) equals what ``DjangoActionStore.load_queued`` reads for the same fresh row."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from apps.actions import services
from apps.actions.models import Action
from apps.actions.scheduler_store import DjangoActionStore, new_action_record
from apps.actions.selectors import submit_catalog
from apps.core.demand import parse_demand
from apps.jobs.models import Job
from apps.resources.models import PoolKind
from tests.factories import (
    ApiQuotaFactory,
    JobFactory,
    PoolFactory,
    ToolFactory,
    TrajectoryFactory,
)
from tests.workers.scheduler.memory_store import MemoryStore
from tests.workers.scheduler.test_service import CORES, POOL, Harness, _record
from workers.scheduler import (
    ActionRecord,
    Applied,
    FinishUpdate,
    RequeueUpdate,
    ScheduledUpdate,
)
from workers.transport import SCHEDULER_GROUP, ActionsSubmitted, Dispatch, Message

pytestmark = pytest.mark.timeout(60)
ALL_CORES = {"cpu": {"min": len(CORES), "max": len(CORES)}}


class CountingStore(MemoryStore):
    """Records every ``load_queued`` call and every action the service tried to schedule."""

    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[list[int]] = []
        self.tried: list[int] = []

    def load_queued(self, pool: str, action_ids: Sequence[int]) -> list[ActionRecord]:
        self.loaded.append(list(action_ids))
        return super().load_queued(pool, action_ids)

    def apply(
        self,
        *,
        scheduled: Sequence[ScheduledUpdate] = (),
        finished: Sequence[FinishUpdate] = (),
        requeued: Sequence[RequeueUpdate] = (),
    ) -> Applied:
        self.tried.extend(update.action_id for update in scheduled)
        return super().apply(scheduled=scheduled, finished=finished, requeued=requeued)


class Running(Harness):
    store: CountingStore

    async def announce(self, action_ids: Sequence[int], records: Sequence[dict[str, Any]]) -> None:
        """What the web process publishes: the ids, with the records it could build."""
        message = ActionsSubmitted(action_ids=tuple(action_ids), records=tuple(records))
        await self.transport.publish(self.streams.events(POOL), message)

    async def dispatches(self) -> list[Dispatch]:
        """Every Dispatch ever published to the node (read by a group of our own)."""
        stream = self.streams.dispatch(self.node)
        await self.transport.ensure_group(stream, "observer")
        deliveries = await self.transport.read(stream, "observer", "t", count=10_000, block_ms=0)
        found: list[Message] = [d.message for d in deliveries]
        return [m for m in found if isinstance(m, Dispatch)]


@pytest.fixture
async def fresh(tmp_path: Path, starts_processes: None) -> AsyncIterator[Running]:
    """Neither the service nor the agent started yet (the test starts them)."""
    running = Running(tmp_path, CountingStore())
    try:
        yield running
    finally:
        await running.close()


@pytest.fixture
async def harness(fresh: Running) -> Running:
    await fresh.start_service()
    await fresh.agent.start()
    return fresh


def _carried(record: ActionRecord) -> dict[str, Any]:
    return asdict(record)


async def test_a_carried_record_is_scheduled_without_reading_the_store(harness: Running) -> None:
    harness.store.records[1] = _record(1, "echo from-store")
    await harness.announce([1], [_carried(_record(1, "echo from-record"))])
    await harness.wait_status(1, {"succeeded"})
    assert harness.store.loaded == []  # no load_queued at all
    assert harness.store.finished[1].output.strip() == "from-record"  # the carried one ran
    assert [(d.action_id, d.attempt) for d in await harness.dispatches()] == [("1", 1)]


@pytest.mark.parametrize(
    "malformed",
    [
        {"action_id": 3, "not_a_field": True},  # an unknown field
        {"action_id": 3, "kind": "cpu"},  # required fields missing
    ],
)
async def test_a_malformed_record_falls_back_to_the_store_for_that_id(
    harness: Running, malformed: dict[str, Any]
) -> None:
    harness.store.records[2] = _record(2, "echo two-store")
    harness.store.records[3] = _record(3, "echo three-store")
    await harness.announce([2, 3], [_carried(_record(2, "echo two-record")), malformed])
    await harness.wait_status(2, {"succeeded"})
    await harness.wait_status(3, {"succeeded"})
    assert harness.store.loaded == [[3]]  # only the id without a usable record
    assert harness.store.finished[2].output.strip() == "two-record"
    assert harness.store.finished[3].output.strip() == "three-store"


async def test_an_id_without_a_record_is_loaded(harness: Running) -> None:
    harness.store.records[4] = _record(4, "echo four")
    harness.store.records[5] = _record(5, "echo five")
    await harness.announce([4, 5], [_carried(_record(5, "echo five"))])
    await harness.wait_status(4, {"succeeded"})
    await harness.wait_status(5, {"succeeded"})
    assert harness.store.loaded == [[4]]


async def test_a_rebuild_reads_the_rows_not_the_records_of_pending_submissions(
    fresh: Running, tmp_path: Path
) -> None:
    """A submission read but not acknowledged before a crash is re-read by the rebuild. Its
    record still says "queued", but the action ended meanwhile: it must not run again."""
    runs = tmp_path / "runs.txt"
    done = _record(9, f"echo ran >> {runs}")
    fresh.store.records[9] = replace(done, status="succeeded", attempts=1)
    fresh.store.records[10] = _record(10, "echo ten-store")
    events = fresh.streams.events(POOL)
    await fresh.transport.ensure_group(events, SCHEDULER_GROUP)
    await fresh.announce([9, 10], [_carried(done), _carried(_record(10, "echo ten-record"))])
    taken = await fresh.transport.read(
        events, SCHEDULER_GROUP, "scheduler:main", count=10, block_ms=0
    )  # delivered to the consumer that then crashed, never acknowledged: pending
    assert len(taken) == 1
    service = await fresh.start_service()
    assert fresh.store.loaded == [[9]]  # 10 is queued in the store: load_active has it
    assert "9" not in service.active
    await fresh.agent.start()
    await fresh.wait_status(10, {"succeeded"})
    assert fresh.store.finished[10].output.strip() == "ten-store"  # the row, not the record
    await asyncio.sleep(0.3)
    assert 9 not in fresh.store.tried
    assert fresh.store.records[9].status == "succeeded" and 9 not in fresh.store.finished
    assert not runs.exists()
    assert [d.action_id for d in await fresh.dispatches()] == ["10"]
    # The crashed consumer's entry was acknowledged by the rebuild. (Other entries, such as the
    # agent's latest heartbeat, may be pending for the instant between read and acknowledgement.)
    still_pending = await fresh.transport.pending(events, SCHEDULER_GROUP)
    assert taken[0].entry_id not in {entry.entry_id for entry in still_pending}


async def test_a_cancelled_row_is_never_dispatched_and_frees_its_units(
    harness: Running, tmp_path: Path
) -> None:
    """The row was cancelled before the scheduler saw the (live) submission whose record says
    "queued": the scheduling UPDATE moves nothing, so it is not dispatched, and its cores go
    back to the pool (the next action needs all of them)."""
    runs = tmp_path / "runs.txt"
    queued = replace(_record(11, f"echo ran >> {runs}"), demand=ALL_CORES)
    harness.store.records[11] = replace(queued, status="cancelled")
    await harness.announce([11], [_carried(queued)])
    follower = replace(_record(12, "echo second"), demand=ALL_CORES)
    harness.store.records[12] = follower
    await harness.announce([12], [_carried(follower)])
    await harness.wait_status(12, {"succeeded"}, timeout_s=5)
    assert harness.store.tried.count(11) == 1  # it was scheduled once, then dropped
    assert [d.action_id for d in await harness.dispatches()] == ["12"]
    service = harness.service
    assert service is not None and service.scheduler is not None
    assert "11" not in service.active
    assert service.scheduler.running_count == 0 and service.scheduler.waiting_count == 0
    assert harness.store.records[11].status == "cancelled" and 11 not in harness.store.finished
    await asyncio.sleep(0.3)
    assert not runs.exists()


async def test_an_id_announced_twice_in_one_batch_runs_once(harness: Running) -> None:
    harness.store.records[7] = _record(7, "sleep 0.5; echo seven")
    message = ActionsSubmitted(action_ids=(7,), records=(_carried(harness.store.records[7]),))
    # One publish_many wakes the reader once: both entries land in one batch.
    await harness.transport.publish_many(harness.streams.events(POOL), [message, message])
    await harness.wait_status(7, {"succeeded", "failed"}, timeout_s=5)
    assert harness.store.records[7].status == "succeeded", harness.store.finished[7].reason
    assert harness.service is not None and harness.service.scheduler is not None
    assert harness.service.scheduler.running_count == 0


# --- new_action_record: what the web process carries equals what the scheduler would read ---


def _submit(job: Job, demand: dict[str, Any], **fields: Any) -> Action:
    quotas = [q.removeprefix("api:") for q in demand if q.startswith("api:")]
    parsed = parse_demand(demand, fields.pop("elasticity", None), api_quotas=quotas)
    spec = services.ActionSpec(demand=parsed, **fields)
    submitted = services.action_submit(job=job, spec=spec)
    assert submitted.created
    return submitted.action


def _carried_and_loaded(action: Action) -> tuple[ActionRecord, ActionRecord]:
    """The record as ``pool_events`` builds it (catalog tool and pool) and as the store reads it."""
    catalog = submit_catalog(fresh=True)
    pool = catalog.pool_by_id(action.pool_id)
    assert pool is not None
    tool = catalog.tool_by_id(action.tool_id)
    carried = new_action_record(action, tool, str(pool.kind))
    loaded = DjangoActionStore().load_queued(pool.name, [action.pk])
    assert len(loaded) == 1
    return carried, loaded[0]


@pytest.mark.django_db
def test_new_action_record_matches_load_queued_for_a_cpu_action_with_a_tool() -> None:
    job = JobFactory.create()
    tool = ToolFactory.create(
        name="sandbox", command_template="pytest -n {dop}", timeout_s=75.0, idempotent=True
    )
    action = _submit(
        job,
        {"cpu": {"min": 1, "max": 4}, "memory_mb": 512},
        elasticity={"resource": "cpu", "efficiency": [1, 0.9, 0.8, 0.7]},
        tool_id=tool.pk,
        pool_id=tool.pool_id,
        trajectory_id=TrajectoryFactory.create(job=job).pk,
        single_unit_duration_s=2.5,
    )
    carried, loaded = _carried_and_loaded(action)
    assert carried == loaded
    # The tool's defaults really were filled in (a same-but-empty record would prove nothing).
    assert (carried.tool, carried.command, carried.timeout_s) == ("sandbox", "pytest -n {dop}", 75)
    assert carried.idempotent and carried.trajectory_id is not None and carried.kind == "cpu"
    assert carried.elasticity == {"resource": "cpu", "efficiency": [1.0, 0.9, 0.8, 0.7]}


@pytest.mark.django_db
def test_new_action_record_matches_load_queued_for_a_cpu_action_without_a_tool() -> None:
    pool = PoolFactory.create(name="cpus", kind=PoolKind.CPU)
    action = _submit(
        JobFactory.create(), {"cpu": 2}, pool_id=pool.pk, command="echo hi", timeout_s=12.0
    )
    carried, loaded = _carried_and_loaded(action)
    assert carried == loaded
    assert (carried.tool, carried.command, carried.timeout_s) == ("default", "echo hi", 12.0)
    assert not carried.idempotent and carried.api_request is None


@pytest.mark.django_db
def test_new_action_record_matches_load_queued_for_an_api_pool_action() -> None:
    pool = PoolFactory.create(name="web-apis", kind=PoolKind.API)
    ApiQuotaFactory.create(name="search")
    request = {"method": "POST", "url": "http://127.0.0.1:9/search", "json": {"q": "loom"}}
    action = _submit(
        JobFactory.create(),
        {"api:search": 1},
        pool_id=pool.pk,
        payload={"request": request, "note": "x"},
    )
    carried, loaded = _carried_and_loaded(action)
    assert carried == loaded
    assert carried.kind == "api" and carried.api_request == request and carried.command is None


@pytest.mark.django_db
def test_the_api_announces_the_record_load_queued_would_read(
    job_actor: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """End to end on the web side: POST /actions/ → the announcement carries a record that
    equals the stored row as the scheduler reads it (after the JSON wire round trip)."""
    from apps.actions import pool_events
    from workers.transport.messages import decode_json, encode_json

    published: list[tuple[str, Message]] = []
    monkeypatch.setattr(pool_events, "publish", lambda pool, m: published.append((pool, m)))
    tool = ToolFactory.create(name="runner", command_template="make test", timeout_s=30.0)
    with django_capture_on_commit_callbacks(execute=True):
        response = job_actor.client.post(
            "/api/v1/actions/", {"tool": "runner", "demand": {"cpu": 1}}, format="json"
        )
    assert response.status_code == 201, response.json()
    assert tool.pool is not None
    assert [pool for pool, _ in published] == [tool.pool.name]
    message = decode_json(encode_json(published[0][1]))
    assert isinstance(message, ActionsSubmitted)
    assert message.action_ids == (response.json()["id"],) and len(message.records) == 1
    loaded = DjangoActionStore().load_queued(tool.pool.name, list(message.action_ids))
    assert [ActionRecord(**message.records[0])] == loaded
