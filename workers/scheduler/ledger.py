"""The actions a pool's scheduler service holds in memory, over the Tangram scheduler.

The ledger is the service's bookkeeping without any I/O: it feeds the ``ElasticScheduler``
(arl-tangram §3 "action scheduler"), remembers the attempt, node and deadline of every active
action, and turns events into the state changes of one batch (``Batch``), which the service
persists in one store call before it dispatches anything.

A lost attempt is retried while attempts remain (``lose``). An idempotent action moves on as soon
as its node stops heartbeating; a non-idempotent one runs at most once, so it is retried only on
proof that its attempt stopped (an agent of its node reclaimed the dispatch and killed its
leftovers: ``agent_lost``), and silence alone keeps it waiting for its node's answer until its
deadline (``check_deadlines``), which ends it ``agent_lost``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from workers.algorithms.tangram import Assignment, ElasticScheduler
from workers.scheduler.config import ServiceConfig
from workers.scheduler.records import ActionRecord, FinishUpdate, RequeueUpdate, ScheduledUpdate
from workers.scheduler.specs import action_spec, allocation_json, spec_id
from workers.scheduler.transitions import FAILED, QUEUED, TIMED_OUT
from workers.transport import ActionResult, Cancel
from workers.transport.messages import REASON_AGENT_LOST

log = logging.getLogger("loom.scheduler")

RETRYABLE_REASONS = frozenset({REASON_AGENT_LOST})


@dataclass
class ActiveAction:
    """One queued or allocated action: its record and the attempt the service handed out."""

    record: ActionRecord
    attempt: int = 0
    node: str | None = None
    deadline: float | None = None
    cancel_requested: bool = False
    seen_running: bool = False


@dataclass
class Batch:
    """The state changes of one event batch or housekeeping pass, persisted in one store call."""

    finished: list[FinishUpdate] = field(default_factory=list)
    requeued: list[RequeueUpdate] = field(default_factory=list)
    cancels: list[tuple[str, Cancel]] = field(default_factory=list)


@dataclass
class Counters:
    """What the dashboard counts over the service's life; a rebuild forgets everything else."""

    dispatched: int = 0
    completed: int = 0
    pass_failures: int = 0
    last_pass_error: dict[str, Any] | None = None
    recoveries: int = 0
    unannounced_found: int = 0  # queued actions the sweep found that no announcement brought


# An action the pass started: its ledger entry, its assignment, the attempt it was handed.
Started = tuple[ActiveAction, Assignment, int]


class ActionLedger:
    def __init__(
        self, scheduler: ElasticScheduler, *, config: ServiceConfig, counters: Counters
    ) -> None:
        self.scheduler = scheduler
        self.config = config
        self.counters = counters
        self.active: dict[str, ActiveAction] = {}
        # Demands the pool can never meet, failed at once: persisted by the next housekeeping.
        self._orphan_failures: list[FinishUpdate] = []

    # --- entering the ledger ----------------------------------------------------------------

    def submit(self, record: ActionRecord, now: float) -> None:
        key = spec_id(record.action_id)
        try:
            self.scheduler.submit(action_spec(record), now)
        except ValueError as exc:
            # A demand this pool can never meet: end it now with the reason, never leave it queued.
            self._orphan_failures.append(
                FinishUpdate(record.action_id, record.attempts, FAILED, now, reason=str(exc))
            )
        self.active[key] = ActiveAction(record)

    def restore(self, record: ActionRecord, now: float) -> tuple[ActiveAction, Assignment]:
        """Re-adopt an action that was allocated before a restart, on the units it holds."""
        assert record.allocation is not None
        allocation = record.allocation
        assignment = self.scheduler.restore(
            action_spec(record),
            node=str(allocation.get("node", record.node)),
            units={name: int(units) for name, units in (allocation.get("units") or {}).items()},
            # A GPU pool's units are its GPU ids (a cpu allocation always names its cores).
            core_ids=tuple(
                int(unit) for unit in allocation.get("cores") or allocation.get("gpus") or ()
            ),
            submitted_at=record.submitted_at,
            now=now,
        )
        active = ActiveAction(
            record,
            attempt=record.attempts,
            node=record.node,
            deadline=now + record.timeout_s + self.config.result_grace_s,
        )
        self.active[spec_id(record.action_id)] = active
        return active, assignment

    def hold(self, record: ActionRecord) -> ActiveAction:
        """An allocated action whose node is gone: held until ``lose`` moves it on."""
        active = ActiveAction(record, record.attempts)
        self.active[spec_id(record.action_id)] = active
        return active

    # --- events -----------------------------------------------------------------------------

    def on_result(self, result: ActionResult, batch: Batch, now: float) -> None:
        active = self.active.get(result.action_id)
        if active is None or active.attempt != result.attempt:
            return  # a stale attempt, or an action that already ended: nothing to do
        if result.status == FAILED and result.reason in RETRYABLE_REASONS:
            self.lose(active, batch, now, f"{result.reason} on {result.node_id}")
            return
        self.scheduler.complete(result.action_id, now)
        del self.active[result.action_id]
        self.counters.completed += 1
        batch.finished.append(
            FinishUpdate(
                action_id=active.record.action_id,
                attempt=result.attempt,
                status=result.status,
                started_at=result.started_at or None,
                finished_at=result.finished_at or now,
                exit_code=result.exit_code,
                output=result.output,
                reason=result.reason or "",
                score=result.score,
                service_timings=dict(result.timings) or None,
                cache_events=result.cache_events,
            )
        )

    def on_cancelled(self, action_ids: Sequence[int], batch: Batch, now: float) -> None:
        """The API already marked them cancelled; stop what runs, forget what waits."""
        for action_id in action_ids:
            key = spec_id(action_id)
            active = self.active.get(key)
            if active is None:
                continue
            if active.node is None:
                self.scheduler.cancel(key, now)
                del self.active[key]
            elif not active.cancel_requested:
                active.cancel_requested = True
                batch.cancels.append((active.node, Cancel(action_id=key, attempt=active.attempt)))

    def newly_running(self, keys: Sequence[str]) -> list[int]:
        """Heartbeats list ``action:attempt`` keys; the first sighting marks an action running."""
        found: list[int] = []
        for key in keys:
            action_key, _, attempt = key.partition(":")
            active = self.active.get(action_key)
            if active is not None and not active.seen_running and str(active.attempt) == attempt:
                active.seen_running = True
                found.append(active.record.action_id)
        return found

    # --- losses and deadlines ---------------------------------------------------------------

    def lose(self, active: ActiveAction, batch: Batch, now: float, why: str) -> None:
        """An attempt's agent is gone: retry elsewhere while attempts remain, else fail it."""
        key = spec_id(active.record.action_id)
        self.scheduler.cancel(key, now)
        attempts = max(active.attempt, active.record.attempts)
        del self.active[key]
        if attempts < self.config.max_attempts:
            record = _with_attempts(active.record, attempts)
            batch.requeued.append(RequeueUpdate(record.action_id, reason=why))
            self.submit(record, now)
        else:
            reason = f"agent_lost: {why} (after {attempts} attempts)"
            batch.finished.append(
                FinishUpdate(active.record.action_id, attempts, FAILED, now, reason=reason)
            )
            log.warning("action %s failed: %s", key, reason)

    def lose_idempotent_on(self, node: str, batch: Batch, now: float) -> None:
        """A node stopped heartbeating. Only idempotent actions move on: silence is no proof
        that an attempt stopped (a node cut off from Redis still runs it), so a non-idempotent
        one waits for its node's answer until its deadline (``check_deadlines``)."""
        retried = [a for a in self.active.values() if a.node == node and a.record.idempotent]
        for active in retried:
            self.lose(active, batch, now, f"node {node} stopped heartbeating")

    def check_deadlines(self, batch: Batch, now: float, live_nodes: Container[str]) -> None:
        """A live agent that never answers still cannot keep an action forever."""
        for key, active in list(self.active.items()):
            if active.deadline is None or now <= active.deadline or active.node is None:
                continue
            self.scheduler.complete(key, now)
            del self.active[key]
            batch.cancels.append((active.node, Cancel(action_id=key, attempt=active.attempt)))
            if active.node not in live_nodes:  # its node fell silent and is still gone
                status, reason = (
                    FAILED,
                    (
                        f"agent_lost: node {active.node} stopped heartbeating and never answered; "
                        "not run again elsewhere (the tool is not idempotent)"
                    ),
                )
            else:
                status, reason = (
                    TIMED_OUT,
                    (
                        f"timeout: no result from {active.node} within the timeout plus "
                        f"{self.config.result_grace_s:.0f} s"
                    ),
                )
            batch.finished.append(
                FinishUpdate(active.record.action_id, active.attempt, status, now, reason=reason)
            )

    def drain_orphans(self) -> list[FinishUpdate]:
        drained, self._orphan_failures = self._orphan_failures, []
        for update in drained:
            self.active.pop(spec_id(update.action_id), None)
        return drained

    # --- the scheduling pass ----------------------------------------------------------------

    def start_pass(
        self, now: float, node_for: Callable[[Assignment], str]
    ) -> tuple[list[Started], list[ScheduledUpdate]]:
        """One pass: what it starts, and the queued → scheduled updates to persist first."""
        started: list[Started] = []
        scheduled: list[ScheduledUpdate] = []
        assignments = self._schedule(now)
        while self.scheduler.next_wakeup(now) == now:  # a pass stopped at its candidate cap
            assignments += self._schedule(now)
        for assignment in assignments:
            active = self.active[assignment.action_id]
            attempt = active.record.attempts + 1
            node = node_for(assignment)
            active.attempt, active.node = attempt, node
            active.deadline = now + active.record.timeout_s + self.config.result_grace_s
            allocation = allocation_json(assignment) | {"node": node}
            scheduled.append(
                ScheduledUpdate(active.record.action_id, attempt, node, allocation, now)
            )
            started.append((active, assignment, attempt))
        return started, scheduled

    def _schedule(self, now: float) -> list[Assignment]:
        """One scheduling pass that a bug in the algorithm cannot turn into a crash loop.

        A pass plans without touching state until it starts actions, so when planning raises,
        the same queue is passed again under the plain FCFS-at-minimum baseline (arl-tangram
        §6.4's ``fcfs-min``, no DoP bounds) and the error is reported in the snapshot. If the
        failure left state half-changed (actions started but not returned), or the fallback
        fails too, the error goes up: the service then rebuilds from the store, which still
        holds every such action as queued, so nothing is lost.
        """
        scheduler = self.scheduler
        running = scheduler.running_count
        try:
            return scheduler.schedule(now)
        except Exception as exc:
            if scheduler.running_count != running:
                raise
            self.counters.pass_failures += 1
            self.counters.last_pass_error = {"at": now, "reason": f"{type(exc).__name__}: {exc}"}
            log.exception("pool %s: a scheduling pass failed; passing again as fcfs-min",
                          self.config.pool)  # fmt: skip
        policy = scheduler.policy()
        scheduler.set_policy(algorithm="fcfs-min", min_dop=None, max_dop=None)
        try:
            return scheduler.schedule(now)
        finally:
            scheduler.set_policy(**policy)

    def only_moved(
        self, started: list[Started], moved: frozenset[int], now: float
    ) -> list[Started]:
        """Keep the assignments the store moved queued → scheduled; forget the others (cancelled
        or ended after this service queued them): they are never dispatched."""
        kept = []
        for entry in started:
            active, assignment, _ = entry
            if active.record.action_id in moved:
                kept.append(entry)
                continue
            self.scheduler.complete(assignment.action_id, now)
            self.active.pop(assignment.action_id, None)
            log.info("pool %s: action %d not dispatched: no longer queued", self.config.pool,
                     active.record.action_id)  # fmt: skip
        return kept


def _with_attempts(record: ActionRecord, attempts: int) -> ActionRecord:
    return replace(record, attempts=attempts, status=QUEUED, node=None, allocation=None)
