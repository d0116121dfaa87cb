"""An in-memory ``ActionStore`` for scheduler-service tests (same guards as the SQL store)."""

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
from workers.transport import NodeRegister

ACTIVE = ("queued", "scheduled", "running")


class MemoryStore:
    def __init__(self, records: Sequence[ActionRecord] = ()) -> None:
        self.records: dict[int, ActionRecord] = {r.action_id: r for r in records}
        self.finished: dict[int, FinishUpdate] = {}
        self.nodes: dict[str, NodeRegister] = {}
        self.policy: tuple[int, dict[str, Any]] | None = None
        self.draining: set[str] = set()
        self.apply_threads: set[int] = set()  # the threads ``apply`` was called on

    def pool_kind(self, pool: str) -> str:
        return "cpu"

    def api_limits(self, pool: str) -> dict[str, tuple[int, int | None, float | None]]:
        return {}

    def load_active(self, pool: str) -> list[ActionRecord]:
        active = [r for r in self.records.values() if r.status in ACTIVE]
        return sorted(active, key=lambda r: (r.submitted_at, r.action_id))

    def load_queued(self, pool: str, action_ids: Sequence[int]) -> list[ActionRecord]:
        return [self.records[i] for i in action_ids if self.records[i].status == "queued"]

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
        for update in requeued:
            record = self.records[update.action_id]
            if record.status in ("scheduled", "running"):
                self.records[update.action_id] = replace(
                    record, status="queued", node=None, allocation=None
                )
        moved = set()
        for s in scheduled:
            record = self.records[s.action_id]
            if record.status == "queued":
                moved.add(s.action_id)
                self.records[s.action_id] = replace(
                    record, status="scheduled", node=s.node, allocation=s.allocation,
                    attempts=s.attempt,
                )  # fmt: skip
        ended = []
        for f in finished:
            record = self.records[f.action_id]
            if record.status in ACTIVE:
                self.records[f.action_id] = replace(record, status=f.status)
                self.finished[f.action_id] = f
                ended.append(f.action_id)
        return Applied(scheduled=frozenset(moved), ended=tuple(ended))

    def mark_running(self, action_ids: Sequence[int], at: float) -> None:
        for action_id in action_ids:
            record = self.records[action_id]
            if record.status == "scheduled":
                self.records[action_id] = replace(record, status="running")

    def draining_nodes(self, pool: str) -> set[str]:
        return set(self.draining)

    def upsert_node(self, register: NodeRegister) -> None:
        self.nodes[register.node_id] = register

    def record_heartbeats(self, node_ids: Sequence[str], at: float) -> None:
        pass

    def mark_nodes_offline(self, node_ids: Sequence[str]) -> None:
        for node in node_ids:
            self.nodes.pop(node, None)
