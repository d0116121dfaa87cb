"""The scheduler service's view of PostgreSQL (``workers.scheduler.store.ActionStore``).

Every write is one transaction per scheduling batch: the per-row conditional UPDATEs go through
``executemany`` (pipelined by psycopg 3, so a batch of hundreds costs about one round trip), and
each keeps the state-machine guard in its WHERE clause — a finish never overwrites a cancel.
Guards, the row forms' columns and the output cap come from ``workers.scheduler.transitions``;
``tests/apps/actions/test_store_contract.py`` checks every form writes what the table says.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import DatabaseError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.actions.hot_path import progress_from_row, progress_returning
from apps.actions.models import ACTIVE_STATUSES, Action, ActionStatus
from apps.actions.notify import publish_action_ended
from apps.policies.models import Policy, PolicyKind
from apps.resources.models import (
    ApiQuota,
    Node,
    NodeStatus,
    PoolKind,
    ResourcePool,
    Service,
    Tool,
)
from workers.scheduler.records import (
    ActionKind,
    ActionRecord,
    Applied,
    FinishUpdate,
    RequeueUpdate,
    ScheduledUpdate,
)
from workers.scheduler.transitions import (
    FINISH,
    QUEUED,
    REQUEUE,
    SCHEDULE,
    SCHEDULED,
    START,
    Transition,
    cap_output,
)
from workers.transport import NodeRegister

CHUNK = 500
S = TypeVar("S")


def _epoch(moment: dt.datetime | None) -> float:
    return moment.timestamp() if moment is not None else 0.0


def _moment(epoch: float | None) -> dt.datetime | None:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC) if epoch else None


# Only the columns a record needs, tool and node joined in (no model instances on the hot path).
RECORD_FIELDS = (
    "id",
    "job_id",
    "demand",
    "submitted_at",
    "status",
    "attempts",
    "timeout_s",
    "command",
    "payload",
    "elasticity",
    "single_unit_duration_s",
    "trajectory_id",
    "allocation",
    "request",
    "priority",
    "service__name",
    "tool__name",
    "tool__command_template",
    "tool__timeout_s",
    "tool__idempotent",
    "tool__network",
    "node__name",
)


_RECORD_KINDS: dict[str, ActionKind] = {PoolKind.API: "api", PoolKind.GPU: "gpu"}


def _record(row: dict[str, Any], kind: str) -> ActionRecord:
    has_tool = row["tool__name"] is not None
    command = row["command"] or (row["tool__command_template"] if has_tool else "")
    timeout = row["timeout_s"] or (row["tool__timeout_s"] if has_tool else 600.0)
    payload = row["payload"] if isinstance(row["payload"], dict) else None
    return ActionRecord(
        action_id=row["id"],
        job_id=row["job_id"],
        kind=_RECORD_KINDS.get(kind, "cpu"),
        demand=row["demand"],
        submitted_at=_epoch(row["submitted_at"]),
        status=row["status"],
        attempts=row["attempts"],
        timeout_s=float(timeout),
        tool=row["tool__name"] if has_tool else "default",
        command=command or None,
        api_request=payload.get("request") if payload and kind == PoolKind.API else None,
        elasticity=row["elasticity"],
        single_unit_duration_s=row["single_unit_duration_s"],
        trajectory_id=row["trajectory_id"],
        # A service request is a pure function of its input (a score, log-probs): safe to run
        # again on another chunk when its agent is lost (arl-tangram §5.3).
        idempotent=bool(has_tool and row["tool__idempotent"]) or row["service__name"] is not None,
        network=bool(has_tool and row["tool__network"]),
        node=row["node__name"],
        allocation=row["allocation"],
        service=row["service__name"],
        request=row["request"],
        priority=row["priority"],
    )


def new_action_record(
    action: Action, tool: Tool | None, pool_kind: str, service: Service | None = None
) -> ActionRecord:
    """The record ``load_queued`` would read for a row just inserted (the same ``_record``), so
    the web process can hand it to the scheduler with the announcement."""
    row = {name: getattr(action, name) for name in RECORD_FIELDS if "__" not in name}
    row["id"] = action.pk
    row.update(
        {
            "service__name": service.name if service is not None else None,
            "tool__name": tool.name if tool is not None else None,
            "tool__command_template": tool.command_template if tool is not None else None,
            "tool__timeout_s": tool.timeout_s if tool is not None else None,
            "tool__idempotent": tool.idempotent if tool is not None else False,
            "tool__network": tool.network if tool is not None else False,
            "node__name": None,
        }
    )
    return _record(row, pool_kind)


TABLE = Action._meta.db_table


def _guard(transition: Transition, column: str = "status") -> str:
    """``status IN (%s, …)``, one placeholder per source state (params: ``*sources``)."""
    return f"{column} IN ({', '.join(['%s'] * len(transition.sources))})"


def _row_form(transition: Transition) -> str:
    """``UPDATE … SET <the transition's columns> WHERE id = %s AND <its guard>``; the params
    are the written columns in ``sets`` order (cleared ones are NULL), the id, the sources."""
    assignments = ", ".join(
        f"{column} = NULL" if column in transition.cleared else f"{column} = %s"
        for column in transition.sets
    )
    return f"SET {assignments} WHERE id = %s AND {_guard(transition)}"


# Row-at-a-time forms (SQLite; PostgreSQL for a batch of one), built from the transition table.
_REQUEUE_ROW = f"UPDATE {TABLE} {_row_form(REQUEUE)}"
_SCHEDULE_ROW = f"UPDATE {TABLE} {_row_form(SCHEDULE)}"
_FINISH_ROW = f"UPDATE {TABLE} {_row_form(FINISH)}"
_FINISH_ROW_AS_A = f"UPDATE {TABLE} AS a {_row_form(FINISH)}"  # PostgreSQL: RETURNING names ``a``

# An end published with the rows it wrote (``notify``: the waiter answers without reading the
# row) when the batch is this small; a bigger one publishes ids and its waiters read the rows.
PROGRESS_IN_NOTICE_UP_TO = 32
PROGRESS_IN_NOTICE_CHARS = 64 * 1024

# Set-based forms (PostgreSQL, a batch of more than one), built once here like the row forms.
_REQUEUE_SET = (
    f"UPDATE {TABLE} AS a SET status = %s, allocation = NULL, node_id = NULL, "
    "scheduled_at = NULL, started_at = NULL, error_reason = v.reason "
    "FROM unnest(%s::bigint[], %s::text[]) AS v(id, reason) "
    f"WHERE a.id = v.id AND {_guard(REQUEUE, 'a.status')}"
)
_SCHEDULE_SET = (
    f"UPDATE {TABLE} AS a SET status = %s, allocation = v.allocation::jsonb, "
    "node_id = v.node_id, scheduled_at = v.scheduled_at, attempts = v.attempts "
    "FROM unnest(%s::bigint[], %s::text[], %s::bigint[], %s::timestamptz[], %s::int[]) "
    "AS v(id, allocation, node_id, scheduled_at, attempts) "
    f"WHERE a.id = v.id AND {_guard(SCHEDULE, 'a.status')} RETURNING a.id"
)
_FINISH_SET = (
    f"UPDATE {TABLE} AS a SET status = v.status, finished_at = v.finished_at, "
    "started_at = v.started_at, exit_code = v.exit_code, output = v.output, "
    "error_reason = v.reason, score = v.score, service_timings = v.service_timings::jsonb, "
    "cache_events = v.cache_events::jsonb "
    "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[], %s::timestamptz[], "
    "%s::int[], %s::text[], %s::text[], %s::float8[], %s::text[], %s::text[]) "
    "AS v(id, status, finished_at, started_at, exit_code, output, reason, score, "
    "service_timings, cache_events) "
    f"WHERE a.id = v.id AND {_guard(FINISH, 'a.status')}"
)


class _SetBasedWriter:
    """PostgreSQL: one ``UPDATE … FROM unnest(arrays)`` per kind of change, whatever the batch
    size (a round trip per batch instead of per row), with the same guards as the row forms.

    A batch of one — a lone action's dispatch or result, on the single-action hot path — takes
    the row form instead: no arrays to build and unnest.
    """

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def requeue(self, rows: list[tuple[int, str]]) -> None:
        ids, reasons = _columns(rows, 2)
        self.cursor.execute(_REQUEUE_SET, [QUEUED, ids, reasons, *REQUEUE.sources])

    def schedule(self, rows: list[tuple[int, str, int | None, Any, int]]) -> set[int]:
        if len(rows) == 1:
            action_id, allocation, node, moment, attempt = rows[0]
            self.cursor.execute(
                f"{_SCHEDULE_ROW} RETURNING id",
                (SCHEDULED, allocation, node, moment, attempt, action_id, *SCHEDULE.sources),
            )
            return {row[0] for row in self.cursor.fetchall()}
        ids, allocations, nodes, moments, attempts = _columns(rows, 5)
        self.cursor.execute(
            _SCHEDULE_SET,
            [SCHEDULED, ids, allocations, nodes, moments, attempts, *SCHEDULE.sources],
        )
        return {row[0] for row in self.cursor.fetchall()}

    def finish(self, rows: list[tuple[Any, ...]], *, returning: bool) -> list[tuple[Any, ...]]:
        """``returning``: answer each moved row's id and progress (``progress_returning``)."""
        tail = f" RETURNING {progress_returning(connection.vendor)}" if returning else ""
        if len(rows) == 1:
            self.cursor.execute(
                _FINISH_ROW_AS_A + tail, (*rows[0][1:], rows[0][0], *FINISH.sources)
            )
        else:
            # id, status, finished, started, code, output, reason, score, timings, cache events
            columns = _columns(rows, 10)
            self.cursor.execute(_FINISH_SET + tail, [*columns, *FINISH.sources])
        return self.cursor.fetchall() if returning else []


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


def _fresh_connection_after_errors(cls: type[S]) -> type[S]:
    """Wrap every public method: a database error closes this thread's connection, so the next
    call (the service retries by rebuilding) takes a fresh one. The scheduler's store thread
    lives as long as the process; outside requests nothing else would ever replace a connection
    that a database restart broke."""

    def guarded(method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return method(self, *args, **kwargs)
            except DatabaseError:
                if not connection.in_atomic_block:
                    connection.close()
                raise

        return call

    for name, member in list(vars(cls).items()):
        if callable(member) and not name.startswith("_"):
            setattr(cls, name, guarded(member))
    return cls


@_fresh_connection_after_errors
class DjangoActionStore:
    """One instance per scheduler process; methods run in the service's store thread (sync ORM)."""

    def __init__(self) -> None:
        self._kinds: dict[str, str] = {}
        self._node_ids: dict[str, int] = {}

    def pool_kind(self, pool: str) -> str:
        if pool not in self._kinds:
            try:
                self._kinds[pool] = ResourcePool.objects.get(name=pool).kind
            except ResourcePool.DoesNotExist as exc:
                raise LookupError(f"no resource pool named {pool!r}") from exc
        return self._kinds[pool]

    def api_limits(self, pool: str) -> dict[str, tuple[int, int | None, float | None]]:
        quotas = ApiQuota.objects.filter(Q(pool__name=pool) | Q(pool__isnull=True))
        return {
            f"api:{quota.name}": (
                quota.concurrency_limit,
                quota.quota_per_period,
                float(quota.period_s) if quota.period_s else None,
            )
            for quota in quotas
        }

    def _records(self, actions: Any, pool: str) -> list[ActionRecord]:
        kind = self.pool_kind(pool)
        return [_record(row, kind) for row in actions.values(*RECORD_FIELDS)]

    def load_active(self, pool: str) -> list[ActionRecord]:
        actions = Action.objects.filter(pool__name=pool, status__in=ACTIVE_STATUSES).order_by(
            "submitted_at", "id"
        )
        return self._records(actions, pool)

    def load_queued(self, pool: str, action_ids: Sequence[int]) -> list[ActionRecord]:
        records: list[ActionRecord] = []
        for start in range(0, len(action_ids), CHUNK):
            chunk = list(action_ids[start : start + CHUNK])
            actions = Action.objects.filter(
                pk__in=chunk, pool__name=pool, status=ActionStatus.QUEUED
            ).order_by("submitted_at", "id")
            records.extend(self._records(actions, pool))
        return records

    def queued_ids(self, pool: str, submitted_before: float) -> list[int]:
        return list(
            Action.objects.filter(
                pool__name=pool,
                status=ActionStatus.QUEUED,
                submitted_at__lt=_moment(submitted_before),
            )
            .order_by("submitted_at", "id")
            .values_list("id", flat=True)
        )

    def load_nodes(self, pool: str) -> list[NodeRegister]:
        """The registrations as ``upsert_node`` kept them; a GPU node's with its GPUs, NVLink
        groups, hosted services and the service cache last stored (arl-tangram §5.3: a rebuilt
        scheduler starts from the cache the agents last reported)."""
        nodes = Node.objects.filter(pool__name=pool).exclude(status=NodeStatus.OFFLINE)
        kind = _RECORD_KINDS.get(self.pool_kind(pool), "cpu")
        registers = []
        for node in nodes:
            self._node_ids[node.name] = node.pk
            capacity = node.capacity or {}
            numa = capacity.get("numa") or [list(range(node.cores))]
            registers.append(
                NodeRegister(
                    node_id=node.name,
                    pool=pool,
                    agent_id=node.agent_version or node.name,
                    kind=kind,
                    backend=str(capacity.get("backend", "local")),
                    cores=tuple(core for group in numa for core in group),
                    numa={numa_node: tuple(group) for numa_node, group in enumerate(numa)},
                    memory_mb=node.memory_mb,
                    concurrency=int(capacity.get("concurrency", 0)),
                    **_gpu_registration(capacity),
                )
            )
        return registers

    def load_policy(self, pool: str) -> tuple[int, dict[str, Any]] | None:
        row = (
            Policy.objects.filter(pool__name=pool, kind=PolicyKind.ACTION_SCHEDULER)
            .values_list("version", "settings")
            .first()
        )
        return (int(row[0]), dict(row[1] or {})) if row is not None else None

    def apply(
        self,
        *,
        scheduled: Sequence[ScheduledUpdate] = (),
        finished: Sequence[FinishUpdate] = (),
        requeued: Sequence[RequeueUpdate] = (),
    ) -> Applied:
        """One transaction. Requeues first: an action lost and rescheduled in the same batch is
        requeued, then scheduled again (the scheduled UPDATE's guard is ``status = queued``)."""
        moved: set[int] = set()
        progress: dict[int, dict[str, Any]] = {}
        kinds = sum(1 for changes in (requeued, scheduled, finished) if changes)
        # One statement on PostgreSQL is atomic by itself: a batch of one kind of change (the
        # common case: a dispatch, or a result) skips BEGIN and COMMIT, two round trips.
        single = kinds == 1 and connection.vendor == "postgresql"
        atomic = contextlib.nullcontext() if single else transaction.atomic()
        with atomic, connection.cursor() as cursor:
            writer = _SetBasedWriter(cursor) if connection.vendor == "postgresql" else None
            if requeued:
                requeue_rows = [(update.action_id, update.reason) for update in requeued]
                if writer is not None:
                    writer.requeue(requeue_rows)
                else:
                    cursor.executemany(
                        _REQUEUE_ROW,
                        [
                            (QUEUED, reason, action_id, *REQUEUE.sources)
                            for action_id, reason in requeue_rows
                        ],
                    )
            if scheduled:
                schedule_rows = [
                    (
                        update.action_id,
                        _json(update.allocation),
                        self._node_pk(update.node),
                        _moment(update.scheduled_at),
                        update.attempt,
                    )
                    for update in scheduled
                ]
                if writer is not None:
                    moved = writer.schedule(schedule_rows)
                else:
                    for action_id, *columns in schedule_rows:
                        cursor.execute(
                            _SCHEDULE_ROW, (SCHEDULED, *columns, action_id, *SCHEDULE.sources)
                        )
                        if cursor.rowcount == 1:
                            moved.add(action_id)
            if finished:
                finish_rows = [
                    (
                        update.action_id,
                        update.status,
                        _moment(update.finished_at),
                        _moment(update.started_at),
                        update.exit_code,
                        cap_output(update.output),
                        update.reason,
                        update.score,
                        _json(update.service_timings) if update.service_timings else None,
                        _json(list(update.cache_events)) if update.cache_events else None,
                    )
                    for update in finished
                ]
                if writer is not None:
                    returned = writer.finish(finish_rows, returning=_progress_fits(finish_rows))
                    progress = {row[0]: progress_from_row(row[1:]) for row in returned}
                else:
                    cursor.executemany(
                        _FINISH_ROW, [(*row[1:], row[0], *FINISH.sources) for row in finish_rows]
                    )
            ended = [update.action_id for update in finished]
            if ended:
                publish = functools.partial(publish_action_ended, ended, progress or None)
                transaction.on_commit(publish)
        return Applied(scheduled=frozenset(moved), ended=tuple(ended))

    def mark_running(self, action_ids: Sequence[int], at: float) -> None:
        """scheduled → running for the actions an agent's heartbeat says it is executing."""
        if action_ids:
            Action.objects.filter(pk__in=list(action_ids), status__in=START.sources).update(
                **START.columns(started_at=_moment(at))
            )

    def upsert_node(self, register: NodeRegister) -> None:
        pool = ResourcePool.objects.get(name=register.pool)
        numa = [list(cores) for _, cores in sorted(register.numa.items())] or [list(register.cores)]
        capacity = {
            "cores": len(register.cores),
            "numa": numa,
            "memory_mb": register.memory_mb,
            "backend": register.backend,
            "concurrency": register.concurrency,
            **_gpu_capacity(register),
        }
        node, _ = Node.objects.update_or_create(
            name=register.node_id,
            defaults={
                "pool": pool,
                "capacity": capacity,
                "cores": len(register.cores),
                "memory_mb": register.memory_mb,
                "gpus": len(register.gpus),
                "gpu_memory_mb": len(register.gpus) * register.gpu_memory_mb,
                "agent_version": register.agent_id[:64],
                "last_heartbeat_at": timezone.now(),
            },
        )
        # A (re-)registering agent brings an offline node back, but never ends an operator's drain.
        Node.objects.filter(pk=node.pk, status=NodeStatus.OFFLINE).update(status=NodeStatus.ONLINE)
        self._node_ids[node.name] = node.pk

    def draining_nodes(self, pool: str) -> set[str]:
        return set(
            Node.objects.filter(pool__name=pool, status=NodeStatus.DRAINING).values_list(
                "name", flat=True
            )
        )

    def record_heartbeats(self, node_ids: Sequence[str], at: float) -> None:
        Node.objects.filter(name__in=list(node_ids)).exclude(status=NodeStatus.DRAINING).update(
            status=NodeStatus.ONLINE, last_heartbeat_at=_moment(at)
        )

    def mark_nodes_offline(self, node_ids: Sequence[str]) -> None:
        Node.objects.filter(name__in=list(node_ids)).update(status=NodeStatus.OFFLINE)

    def _node_pk(self, name: str) -> int | None:
        if name not in self._node_ids:
            pk = Node.objects.filter(name=name).values_list("pk", flat=True).first()
            if pk is None:
                return None
            self._node_ids[name] = pk
        return self._node_ids[name]


def _gpu_capacity(register: NodeRegister) -> dict[str, Any]:
    """A GPU node's part of ``Node.capacity`` (arl-tangram §5.3 "Pool"): its GPUs in the layout
    the registration API uses (``apps.resources.capacity``), NVLink groups, hosted services and
    the service cache (which service is resident on which chunk). Nothing for a CPU or API node.
    """
    if not register.gpus:
        return {}
    return {
        "gpus": [{"index": gpu, "memory_mb": register.gpu_memory_mb} for gpu in register.gpus],
        "nvlink_groups": [list(group) for group in register.nvlink_groups],
        "services": register.services,
        "cache": list(register.cache),
    }


def _gpu_registration(capacity: dict[str, Any]) -> dict[str, Any]:
    """``NodeRegister``'s GPU fields from ``_gpu_capacity``'s layout (none for a CPU node)."""
    gpus = [gpu for gpu in capacity.get("gpus") or () if isinstance(gpu, dict)]
    if not gpus:
        return {}
    return {
        "gpus": tuple(int(gpu["index"]) for gpu in gpus),
        # The registration carries one memory per GPU: the smallest (what every chunk can hold).
        "gpu_memory_mb": min(int(gpu["memory_mb"]) for gpu in gpus),
        "nvlink_groups": tuple(
            tuple(int(index) for index in group) for group in capacity.get("nvlink_groups") or ()
        ),
        "services": dict(capacity.get("services") or {}),
        "cache": tuple(dict(entry) for entry in capacity.get("cache") or ()),
    }


def _progress_fits(rows: Sequence[tuple[Any, ...]]) -> bool:
    """Whether the ends of ``rows`` (finish rows: output at index 5) are published with their
    rows: a handful, with short outputs (every web process receives every notice)."""
    if len(rows) > PROGRESS_IN_NOTICE_UP_TO:
        return False
    return sum(len(row[5]) for row in rows) <= PROGRESS_IN_NOTICE_CHARS


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
