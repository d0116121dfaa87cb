"""What the scheduler service needs from the system of record (PostgreSQL in production).

Methods are synchronous; the service calls them off the event loop (``asyncio.to_thread``), one
call per scheduling batch, so the database is never on the per-action path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from workers.scheduler.records import (
    ActionRecord,
    Applied,
    FinishUpdate,
    RequeueUpdate,
    ScheduledUpdate,
)
from workers.transport import NodeRegister


class ActionStore(Protocol):
    def pool_kind(self, pool: str) -> str:
        """``cpu``, ``gpu`` or ``api``; raises LookupError for an unknown pool."""
        ...

    def api_limits(self, pool: str) -> dict[str, tuple[int, int | None, float | None]]:
        """``api:<name>`` → (concurrency, quota per period or None, period seconds or None)."""
        ...

    def load_active(self, pool: str) -> list[ActionRecord]:
        """Every queued, scheduled or running action of the pool, oldest submission first."""
        ...

    def load_queued(self, pool: str, action_ids: Sequence[int]) -> list[ActionRecord]:
        """Those of the given actions that belong to the pool and are still queued."""
        ...

    def queued_ids(self, pool: str, submitted_before: float) -> list[int]:
        """Ids of the pool's queued actions submitted before the epoch ``submitted_before``."""
        ...

    def load_nodes(self, pool: str) -> list[NodeRegister]:
        """The pool's registered, not-offline nodes, as their agents last described them."""
        ...

    def load_policy(self, pool: str) -> tuple[int, dict[str, Any]] | None:
        """(version, settings) of the pool's action-scheduler policy, or None."""
        ...

    def apply(
        self,
        *,
        scheduled: Sequence[ScheduledUpdate] = (),
        finished: Sequence[FinishUpdate] = (),
        requeued: Sequence[RequeueUpdate] = (),
    ) -> Applied:
        """Persist one batch in one transaction; each change keeps its state-machine guard."""
        ...

    def mark_running(self, action_ids: Sequence[int], at: float) -> None:
        """scheduled → running for what an agent's heartbeat reports it is executing."""
        ...

    def draining_nodes(self, pool: str) -> set[str]:
        """Nodes an operator is draining: they finish what runs but take nothing new."""
        ...

    def upsert_node(self, register: NodeRegister) -> None: ...

    def record_heartbeats(self, node_ids: Sequence[str], at: float) -> None: ...

    def mark_nodes_offline(self, node_ids: Sequence[str]) -> None: ...
