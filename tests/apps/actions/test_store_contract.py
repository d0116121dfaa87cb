"""The ``ActionStore`` contract: one suite run against the scheduler tests' in-memory store and the
SQL store on this run's database (PostgreSQL under ``make test-postgres``, SQLite under
``make test-sqlite``), each row checked against ``workers.scheduler.transitions``. Then each fast
SQL form (set-based and single-row on PostgreSQL, the row form on SQLite) against the plain ORM
form of the same transition: the same rows, column for column."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from workers.scheduler.records import (
    ActionRecord,
    Applied,
    FinishUpdate,
    RequeueUpdate,
    ScheduledUpdate,
)
from workers.scheduler.transitions import (
    ACTIVE,
    ALLOCATED,
    CANCEL,
    FINISH,
    OUTPUT_LIMIT_CHARS,
    REQUEUE,
    SCHEDULE,
    START,
    TERMINAL,
    TRANSITIONS,
    Transition,
)

NODE = "n1"
ALLOCATION = {"cores": [1], "units": {"cpu": 1}, "node": NODE}
# Everything a transition may write, as the suite compares it (times in epoch seconds, the node
# by name).
COLUMNS = (
    "status",
    "attempts",
    "allocation",
    "node",
    "scheduled_at",
    "started_at",
    "finished_at",
    "exit_code",
    "output",
    "error_reason",
    "score",
    "service_timings",
    "cache_events",
)
INITIAL = dict.fromkeys(COLUMNS) | {"status": "queued", "attempts": 0, "output": ""}
INITIAL["error_reason"] = ""


class Harness(Protocol):
    """One store, and the two things the contract needs around it: a new queued action, and
    the row as the store holds it."""

    store: Any

    def create(self) -> int: ...

    def row(self, action_id: int) -> dict[str, Any]: ...

    def cancel(self, action_id: int, reason: str, at: float) -> bool: ...


class MemoryHarness:
    def __init__(self) -> None:
        from tests.workers.scheduler.memory_store import MemoryStore

        self.store = MemoryStore()
        self._ids = itertools.count(1)

    def create(self) -> int:
        action_id = next(self._ids)
        self.store.records[action_id] = ActionRecord(action_id, 1, "cpu", {"cpu": 1}, 0.0)
        return action_id

    def row(self, action_id: int) -> dict[str, Any]:
        written = dict(self.store.columns.get(action_id, {}))
        if "node_id" in written:
            written["node"] = written.pop("node_id")
        return _normalised(INITIAL | written)

    def cancel(self, action_id: int, reason: str, at: float) -> bool:
        return bool(self.store.cancel(action_id, reason, at))


class DjangoHarness:
    def __init__(self) -> None:
        from apps.actions.scheduler_store import DjangoActionStore
        from tests.factories import NodeFactory, PoolFactory

        self.pool = PoolFactory.create(name="contract")
        NodeFactory.create(name=NODE, pool=self.pool)
        self.store = DjangoActionStore()

    def create(self) -> int:
        from tests.factories import ActionFactory

        return int(ActionFactory.create(pool=self.pool).pk)

    def row(self, action_id: int) -> dict[str, Any]:
        from apps.actions.models import Action

        fields = [c if c != "node" else "node__name" for c in COLUMNS]
        row = Action.objects.values(*fields).get(pk=action_id)
        row["node"] = row.pop("node__name")
        for name in ("scheduled_at", "started_at", "finished_at"):
            row[name] = row[name].timestamp() if row[name] is not None else None
        return _normalised(row)

    def cancel(self, action_id: int, reason: str, at: float) -> bool:
        import datetime as dt

        from apps.actions import services

        moment = dt.datetime.fromtimestamp(at, tz=dt.UTC)
        return services.action_cancel(action_id=action_id, reason=reason, now=moment)


def _normalised(row: dict[str, Any]) -> dict[str, Any]:
    """Times to the microsecond (what the databases keep); every column of ``COLUMNS``."""
    return {
        name: round(row[name], 6) if name.endswith("_at") and row[name] is not None else row[name]
        for name in COLUMNS
    }


@pytest.fixture(params=["memory", "django"])
def harness(request: pytest.FixtureRequest) -> Harness:
    if request.param == "memory":
        return MemoryHarness()
    request.getfixturevalue("db")
    return DjangoHarness()


def _expected(before: dict[str, Any], transition: Transition, **values: Any) -> dict[str, Any]:
    """The row after ``transition``, from the table alone: its columns over the row before."""
    status = values.pop("status", None)
    written = transition.columns(status, **values)
    if "node_id" in written:
        written["node"] = written.pop("node_id")
    return _normalised(before | written)


def _schedule(harness: Harness, ids: list[int], at: float, attempt: int = 1) -> Applied:
    updates = [ScheduledUpdate(i, attempt, NODE, ALLOCATION, at) for i in ids]
    return harness.store.apply(scheduled=updates)


SIZES = [1, 3]  # one: the single-row statements; several: set-based on PostgreSQL


@pytest.mark.parametrize("size", SIZES)
def test_schedule_moves_only_queued_rows_and_counts_the_attempt(harness: Harness, size: int):
    now = time.time()
    ids = [harness.create() for _ in range(size)]
    cancelled = harness.create()
    assert harness.cancel(cancelled, "changed my mind", now)
    before = {i: harness.row(i) for i in ids}
    applied = _schedule(harness, [*ids, cancelled], now, attempt=2)
    assert applied.scheduled == frozenset(ids)
    for action_id in ids:
        assert harness.row(action_id) == _expected(
            before[action_id],
            SCHEDULE,
            allocation=ALLOCATION,
            node_id=NODE,
            scheduled_at=now,
            attempts=2,
        )
    assert harness.row(cancelled)["status"] == "cancelled"
    assert _schedule(harness, ids, now + 1).scheduled == frozenset()  # no longer queued


@pytest.mark.parametrize("size", SIZES)
def test_start_moves_only_scheduled_rows(harness: Harness, size: int):
    now = time.time()
    scheduled = [harness.create() for _ in range(size)]
    queued = harness.create()
    _schedule(harness, scheduled, now)
    before = {i: harness.row(i) for i in [*scheduled, queued]}
    harness.store.mark_running([*scheduled, queued], now + 1)
    for action_id in scheduled:
        assert harness.row(action_id) == _expected(before[action_id], START, started_at=now + 1)
    assert harness.row(queued) == before[queued]


@pytest.mark.parametrize("size", SIZES)
def test_finish_ends_any_active_row_caps_its_output_and_never_overwrites_a_cancel(
    harness: Harness, size: int
):
    now = time.time()
    queued, scheduled, running = ([harness.create() for _ in range(size)] for _ in range(3))
    cancelled = harness.create()
    _schedule(harness, scheduled + running, now)
    harness.store.mark_running(running, now + 1)
    assert harness.cancel(cancelled, "stop", now + 1)
    before = {i: harness.row(i) for i in [*queued, *scheduled, *running, cancelled]}
    long_output = "x" * (OUTPUT_LIMIT_CHARS + 10)
    ended = [*queued, *scheduled, *running]
    result: dict[str, Any] = {
        "finished_at": now + 2,
        "started_at": now + 1,
        "exit_code": 3,
        "score": 0.75,
        "service_timings": SERVICE_TIMINGS,
        "cache_events": list(CACHE_EVENTS),
    }
    applied = harness.store.apply(
        finished=[
            FinishUpdate(
                i,
                1,
                "failed",
                output=long_output,
                reason="exit_code_nonzero",
                **(result | {"cache_events": CACHE_EVENTS}),
            )
            for i in [*ended, cancelled]
        ]
    )
    assert applied.ended == (*ended, cancelled)  # every end is published
    for action_id in ended:
        row = harness.row(action_id)
        assert len(row["output"]) == OUTPUT_LIMIT_CHARS
        assert row == _expected(
            before[action_id],
            FINISH,
            status="failed",
            output=long_output,
            error_reason="exit_code_nonzero",
            **result,
        )
    assert harness.row(cancelled) == before[cancelled]


@pytest.mark.parametrize("size", SIZES)
def test_requeue_drops_the_allocation_keeps_the_attempts_and_reschedules_in_one_batch(
    harness: Harness, size: int
):
    now = time.time()
    scheduled, running = ([harness.create() for _ in range(size)] for _ in range(2))
    queued = harness.create()
    _schedule(harness, scheduled + running, now)
    harness.store.mark_running(running, now + 1)
    before = {i: harness.row(i) for i in [*scheduled, *running, queued]}
    harness.store.apply(requeued=[RequeueUpdate(i, "agent_lost") for i in [*scheduled, queued]])
    for action_id in scheduled:
        row = harness.row(action_id)
        assert row == _expected(before[action_id], REQUEUE, error_reason="agent_lost")
        assert row["attempts"] == 1 and row["allocation"] is None
    assert harness.row(queued) == before[queued]
    # Lost and placed again in one batch: requeued first, then scheduled with the next attempt.
    applied = harness.store.apply(
        requeued=[RequeueUpdate(i, "agent_lost") for i in running],
        scheduled=[ScheduledUpdate(i, 2, NODE, ALLOCATION, now + 2) for i in running],
    )
    assert applied.scheduled == frozenset(running)
    for action_id in running:
        requeued = _expected(before[action_id], REQUEUE, error_reason="agent_lost")
        assert harness.row(action_id) == _expected(
            requeued,
            SCHEDULE,
            allocation=ALLOCATION,
            node_id=NODE,
            scheduled_at=now + 2,
            attempts=2,
        )


def test_cancel_ends_any_active_row_once(harness: Harness):
    now = time.time()
    action_id = harness.create()
    before = harness.row(action_id)
    assert harness.cancel(action_id, "not needed", now)
    assert harness.row(action_id) == _expected(
        before, CANCEL, finished_at=now, error_reason="not needed"
    )
    assert not harness.cancel(action_id, "again", now + 1)


def test_the_table_is_the_models_state_machine():
    from apps.actions.models import ACTIVE_STATUSES, ALLOCATED_STATUSES, ActionStatus

    assert set(ActionStatus.values) == {*ACTIVE, *TERMINAL}
    assert (ACTIVE_STATUSES, ALLOCATED_STATUSES) == (ACTIVE, ALLOCATED)
    for transition in TRANSITIONS.values():
        assert set(transition.sources) <= set(ACTIVE)  # nothing leaves a terminal state
    assert [t.name for t in TRANSITIONS.values() if t.counts_attempt] == ["schedule"]
    with pytest.raises(ValueError, match="finish ends in one of"):
        FINISH.columns("queued")


# -- each fast SQL form writes what the plain ORM form writes ---------------------------------


def _orm(transition: Transition, action_id: int, status: str | None = None, **values: Any) -> int:
    """The plain ORM form of a transition, from the table alone."""
    from apps.actions.models import Action

    return int(
        Action.objects.filter(pk=action_id, status__in=transition.sources).update(
            **transition.columns(status, **values)
        )
    )


def _moment(epoch: float) -> Any:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


Step = Callable[[DjangoHarness, list[int], float], None]


def _store_schedule(harness: DjangoHarness, ids: list[int], now: float) -> None:
    _schedule(harness, ids, now)


def _orm_schedule(harness: DjangoHarness, ids: list[int], now: float) -> None:
    from apps.resources.models import Node

    node = Node.objects.get(name=NODE).pk
    for action_id in ids:
        _orm(
            SCHEDULE,
            action_id,
            allocation=ALLOCATION,
            node_id=node,
            scheduled_at=_moment(now),
            attempts=1,
        )


def _store_start(harness: DjangoHarness, ids: list[int], now: float) -> None:
    harness.store.mark_running(ids, now + 1)


def _orm_start(harness: DjangoHarness, ids: list[int], now: float) -> None:
    for action_id in ids:
        _orm(START, action_id, started_at=_moment(now + 1))


LONG_OUTPUT = "y" * (OUTPUT_LIMIT_CHARS + 1)
# A GPU agent's report (workers/agents/gpu/cache.py ``Timings`` and ``CacheEvent``).
SERVICE_TIMINGS = {"queue_s": 0.01, "restore_s": 0.25, "execute_s": 0.5}
CACHE_EVENTS = (
    {"kind": "evict", "service": "teacher", "start": 0, "size": 2, "at": 10.0, "seconds": 0.0},
    {"kind": "restore", "service": "rm", "start": 0, "size": 2, "at": 10.0, "seconds": 0.25},
)


def _store_finish(harness: DjangoHarness, ids: list[int], now: float) -> None:
    harness.store.apply(
        finished=[
            FinishUpdate(
                i,
                1,
                "timed_out",
                now + 2,
                now + 1,
                124,
                LONG_OUTPUT,
                "timeout",
                0.5,
                SERVICE_TIMINGS,
                CACHE_EVENTS,
            )
            for i in ids
        ]
    )


def _orm_finish(harness: DjangoHarness, ids: list[int], now: float) -> None:
    for action_id in ids:
        _orm(
            FINISH,
            action_id,
            "timed_out",
            finished_at=_moment(now + 2),
            started_at=_moment(now + 1),
            exit_code=124,
            output=LONG_OUTPUT,
            error_reason="timeout",
            score=0.5,
            service_timings=SERVICE_TIMINGS,
            cache_events=list(CACHE_EVENTS),
        )


def _store_requeue(harness: DjangoHarness, ids: list[int], now: float) -> None:
    harness.store.apply(requeued=[RequeueUpdate(i, "evicted") for i in ids])


def _orm_requeue(harness: DjangoHarness, ids: list[int], now: float) -> None:
    for action_id in ids:
        _orm(REQUEUE, action_id, error_reason="evicted")


# Each transition after the steps that lead to it, store form and ORM form.
PATHS: dict[str, list[tuple[Step, Step]]] = {
    "schedule": [(_store_schedule, _orm_schedule)],
    "start": [(_store_schedule, _orm_schedule), (_store_start, _orm_start)],
    "finish_queued": [(_store_finish, _orm_finish)],
    "finish_running": [
        (_store_schedule, _orm_schedule),
        (_store_start, _orm_start),
        (_store_finish, _orm_finish),
    ],
    "requeue": [
        (_store_schedule, _orm_schedule),
        (_store_start, _orm_start),
        (_store_requeue, _orm_requeue),
    ],
}


@pytest.mark.django_db
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_fast_sql_form_writes_the_rows_the_orm_form_writes(path: str, size: int):
    harness = DjangoHarness()
    now = time.time()
    by_store = [harness.create() for _ in range(size)]
    by_orm = [harness.create() for _ in range(size)]
    for store_step, orm_step in PATHS[path]:
        store_step(harness, by_store, now)
        orm_step(harness, by_orm, now)
    for store_id, orm_id in zip(by_store, by_orm, strict=True):
        assert harness.row(store_id) == harness.row(orm_id)
        assert harness.row(store_id) != INITIAL


# -- GPU pools (arl-tangram §5.3): registrations with their cache, service actions -------------

GPU_NODE = "g1"
GPU_SERVICES: dict[str, dict[str, Any]] = {
    "rm": {"kind": "torch", "sizes": [1, 2], "device_mb": [300.0, 300.0]},
    "broken": {"kind": "torch", "error": "config.json missing"},
}
GPU_REQUEST = {"input_ids": [[1, 2, 3], [4, 5]]}


def _gpu_register(cache: tuple[dict[str, Any], ...] = ()) -> Any:
    from workers.transport import NodeRegister

    return NodeRegister(
        node_id=GPU_NODE,
        pool="contract-gpu",
        agent_id="gpu-agent-1",
        kind="gpu",
        backend="torch",
        cores=(0, 1),
        numa={0: (0, 1)},
        memory_mb=4096,
        gpus=(0, 1, 2, 3),
        gpu_memory_mb=1000,
        nvlink_groups=((0, 1), (2, 3)),
        services=GPU_SERVICES,
        cache=cache,
    )


# What a store keeps of a registration: everything but the per-connection fields.
KEPT = ("node_id", "pool", "kind", "backend", "cores", "numa", "memory_mb", "gpus")
KEPT_GPU = (*KEPT, "gpu_memory_mb", "nvlink_groups", "services", "cache")


def _kept(register: Any) -> dict[str, Any]:
    return {name: getattr(register, name) for name in KEPT_GPU}


class GpuHarness(Protocol):
    store: Any

    def create_gpu_action(self, service: str, request: Any, priority: int) -> int: ...


class MemoryGpuHarness:
    def __init__(self) -> None:
        from tests.workers.scheduler.memory_store import MemoryStore

        class GpuMemoryStore(MemoryStore):
            def pool_kind(self, pool: str) -> str:
                return "gpu"

        self.store = GpuMemoryStore()
        self._ids = itertools.count(1)

    def create_gpu_action(self, service: str, request: Any, priority: int) -> int:
        action_id = next(self._ids)
        self.store.records[action_id] = ActionRecord(
            action_id,
            1,
            "gpu",
            {"gpu": {"units": [1, 2]}},
            0.0,
            service=service,
            request=request,
            priority=priority,
            idempotent=True,
        )
        return action_id


class DjangoGpuHarness:
    def __init__(self) -> None:
        from apps.actions.scheduler_store import DjangoActionStore
        from apps.resources.models import PoolKind
        from tests.factories import PoolFactory, ServiceFactory

        self.pool = PoolFactory.create(name="contract-gpu", kind=PoolKind.GPU)
        self.services = {"rm": ServiceFactory.create(name="rm", pool=self.pool)}
        self.store = DjangoActionStore()

    def create_gpu_action(self, service: str, request: Any, priority: int) -> int:
        from tests.factories import ActionFactory

        return int(
            ActionFactory.create(
                pool=self.pool,
                service=self.services[service],
                request=request,
                priority=priority,
                demand={"gpu": {"units": [1, 2]}},
                key_resource="gpu",
                min_units=1,
                max_units=2,
            ).pk
        )


@pytest.fixture(params=["memory", "django"])
def gpu_harness(request: pytest.FixtureRequest) -> GpuHarness:
    if request.param == "memory":
        return MemoryGpuHarness()
    request.getfixturevalue("db")
    return DjangoGpuHarness()


def test_a_gpu_pool_is_of_kind_gpu(gpu_harness: GpuHarness):
    assert gpu_harness.store.pool_kind("contract-gpu") == "gpu"


def test_a_gpu_registration_comes_back_whole_from_load_nodes(gpu_harness: GpuHarness):
    register = _gpu_register()
    gpu_harness.store.upsert_node(register)
    (loaded,) = gpu_harness.store.load_nodes("contract-gpu")
    assert _kept(loaded) == _kept(register)
    assert loaded.services["broken"] == {"kind": "torch", "error": "config.json missing"}


def test_the_cache_a_heartbeat_changed_is_what_a_rebuild_loads(gpu_harness: GpuHarness):
    from dataclasses import replace

    gpu_harness.store.upsert_node(_gpu_register())
    cache = (
        {"service": "rm", "start": 0, "size": 2, "last_used": 1700000000.25},
        {"service": "rm", "start": 3, "size": 1, "last_used": 1700000001.5},
    )
    (registered,) = gpu_harness.store.load_nodes("contract-gpu")
    # What the scheduler stores when a heartbeat changes the cache (``NodeRegistry.heartbeat``).
    gpu_harness.store.upsert_node(replace(registered, cache=cache))
    (loaded,) = gpu_harness.store.load_nodes("contract-gpu")
    assert loaded.cache == cache
    assert _kept(loaded) == _kept(_gpu_register(cache))
    gpu_harness.store.upsert_node(replace(registered, cache=()))  # everything evicted
    assert gpu_harness.store.load_nodes("contract-gpu")[0].cache == ()


def test_a_gpu_action_loads_with_its_service_request_and_priority(gpu_harness: GpuHarness):
    action_id = gpu_harness.create_gpu_action("rm", GPU_REQUEST, 7)
    (record,) = gpu_harness.store.load_active("contract-gpu")
    assert (record.action_id, record.kind) == (action_id, "gpu")
    assert (record.service, record.request, record.priority) == ("rm", GPU_REQUEST, 7)
    assert record.idempotent  # a lost agent's service request runs again elsewhere
    (queued,) = gpu_harness.store.load_queued("contract-gpu", [action_id])
    assert queued == record


def test_a_gpu_action_scheduled_on_a_chunk_keeps_it_for_the_rebuild(gpu_harness: GpuHarness):
    gpu_harness.store.upsert_node(_gpu_register())
    action_id = gpu_harness.create_gpu_action("rm", GPU_REQUEST, 0)
    allocation = {"gpus": [2, 3], "units": {"gpu": 2}, "node": GPU_NODE}
    applied = gpu_harness.store.apply(
        scheduled=[ScheduledUpdate(action_id, 1, GPU_NODE, allocation, time.time())]
    )
    assert applied.scheduled == frozenset({action_id})
    (record,) = gpu_harness.store.load_active("contract-gpu")
    assert (record.status, record.node, record.allocation) == ("scheduled", GPU_NODE, allocation)
    assert record.service == "rm"
