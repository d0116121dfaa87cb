"""An in-memory ``ActionStore`` for scheduler-service tests: the same transition table as the SQL
store (``workers.scheduler.transitions``), and the same columns written (``columns``, which the
store contract suite compares with the SQL store's rows)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from workers.scheduler import (
    ActionRecord,
    Applied,
    FinishUpdate,
    RequeueUpdate,
    ScheduledUpdate,
)
from workers.scheduler.transitions import (
    ACTIVE,
    CANCEL,
    FINISH,
    REQUEUE,
    SCHEDULE,
    START,
    Transition,
)
from workers.transport import NodeRegister


class MemoryStore:
    def __init__(self, records: Sequence[ActionRecord] = ()) -> None:
        self.records: dict[int, ActionRecord] = {r.action_id: r for r in records}
        self.finished: dict[int, FinishUpdate] = {}
        self.nodes: dict[str, NodeRegister] = {}
        self.policy: tuple[int, dict[str, Any]] | None = None
        self.draining: set[str] = set()
        self.apply_threads: set[int] = set()  # the threads ``apply`` was called on
        # Every column a transition wrote, per action (times as epoch seconds, nodes by name).
        self.columns: dict[int, dict[str, Any]] = {}

    def pool_kind(self, pool: str) -> str:
        return "cpu"

    def api_limits(self, pool: str) -> dict[str, tuple[int, int | None, float | None]]:
        return {}

    def load_active(self, pool: str) -> list[ActionRecord]:
        active = [r for r in self.records.values() if r.status in ACTIVE]
        return sorted(active, key=lambda r: (r.submitted_at, r.action_id))

    def load_queued(self, pool: str, action_ids: Sequence[int]) -> list[ActionRecord]:
        return [self.records[i] for i in action_ids if self.records[i].status == "queued"]

    def queued_ids(self, pool: str, submitted_before: float) -> list[int]:
        return sorted(
            r.action_id
            for r in self.records.values()
            if r.status == "queued" and r.submitted_at < submitted_before
        )

    def load_nodes(self, pool: str) -> list[NodeRegister]:
        return list(self.nodes.values())

    def load_policy(self, pool: str) -> tuple[int, dict[str, Any]] | None:
        return self.policy

    def apply(
        self,
        *,
        scheduled: Sequence[ScheduledUpdate] = (),
        finished: Sequence[FinishUpdate] = (),
        requeued: Sequence[RequeueUpdate] = (),
    ) -> Applied:
        self.apply_threads.add(threading.get_ident())
        for requeue in requeued:
            self._move(requeue.action_id, REQUEUE, error_reason=requeue.reason)
        moved = set()
        for schedule in scheduled:
            if self._move(
                schedule.action_id,
                SCHEDULE,
                allocation=schedule.allocation,
                node_id=schedule.node,
                scheduled_at=schedule.scheduled_at,
                attempts=schedule.attempt,
            ):
                moved.add(schedule.action_id)
        ended = []
        for finish in finished:
            columns = {
                "finished_at": finish.finished_at,
                "started_at": finish.started_at,
                "exit_code": finish.exit_code,
                "output": finish.output,
                "error_reason": finish.reason,
                "score": finish.score,
                "service_timings": finish.service_timings,
                "cache_events": list(finish.cache_events) or None,
            }
            if self._move(finish.action_id, FINISH, status=finish.status, **columns):
                self.finished[finish.action_id] = replace(
                    finish, output=self.columns[finish.action_id]["output"]
                )
            ended.append(finish.action_id)  # as the SQL store: every end is published
        return Applied(scheduled=frozenset(moved), ended=tuple(ended))

    def mark_running(self, action_ids: Sequence[int], at: float) -> None:
        for action_id in action_ids:
            self._move(action_id, START, started_at=at)

    def cancel(self, action_id: int, reason: str, at: float) -> bool:
        """What the API's cancel writes (``apps.actions.services.action_cancel``)."""
        return self._move(action_id, CANCEL, finished_at=at, error_reason=reason)

    def _move(
        self, action_id: int, transition: Transition, status: str | None = None, **values: Any
    ) -> bool:
        """Apply ``transition`` if its guard admits the action's status; True if it moved."""
        record = self.records[action_id]
        if not transition.allows(record.status):
            return False
        columns = transition.columns(status, **values)
        self.columns.setdefault(action_id, {}).update(columns)
        changes = {"status": columns["status"]}
        if "allocation" in columns:
            changes.update(allocation=columns["allocation"], node=columns["node_id"])
        if transition.counts_attempt:
            changes["attempts"] = columns["attempts"]
        self.records[action_id] = replace(record, **changes)
        return True

    def draining_nodes(self, pool: str) -> set[str]:
        return set(self.draining)

    def upsert_node(self, register: NodeRegister) -> None:
        self.nodes[register.node_id] = register

    def record_heartbeats(self, node_ids: Sequence[str], at: float) -> None:
        pass

    def mark_nodes_offline(self, node_ids: Sequence[str]) -> None:
        for node in node_ids:
            self.nodes.pop(node, None)
