"""The per-pool scheduler service (issue 6; arl-tangram §3 "action scheduler").

One asyncio task reads the pool's event stream in batches (submissions, agent results, node
registrations and heartbeats, cancellations) and, per batch: feeds the shared ``ElasticScheduler``,
runs one scheduling pass, persists the batch's state changes in one store transaction, publishes
the dispatches, then acknowledges the batch. Persisting *before* dispatching and acknowledging
*after* persisting is what makes a ``kill -9`` at any point safe: on restart the service rebuilds
from the store (queued → waiting, scheduled → running again on the same units, re-dispatched
with the same attempt number) and re-reads its unacknowledged events.

A node that stops heartbeating loses its idempotent actions to a retry elsewhere at once. A
non-idempotent action runs at most once: it is retried only on proof that its attempt stopped
(an agent of its node reclaimed the dispatch and killed its leftovers: ``agent_lost``); silence
alone keeps it waiting for its node's answer until its deadline, then ends it ``agent_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from workers.algorithms.tangram import (
    Assignment,
    BasicLimit,
    BasicTopology,
    CpuNodeSpec,
    CpuTopology,
    ElasticScheduler,
    Topology,
)
from workers.scheduler.policy import policy_apply
from workers.scheduler.records import ActionRecord, FinishUpdate, RequeueUpdate, ScheduledUpdate
from workers.scheduler.specs import action_spec, allocation_json, dispatch_for, spec_id
from workers.scheduler.store import ActionStore
from workers.threads import BlockingCalls, InlineCalls, OwnThreads
from workers.transport import (
    SCHEDULER_GROUP,
    ActionResult,
    ActionsCancelled,
    ActionsSubmitted,
    Cancel,
    Delivery,
    Dispatch,
    Heartbeat,
    NodeRegister,
    StreamNames,
    Transport,
)

log = logging.getLogger("loom.scheduler")

RETRYABLE_REASONS = frozenset({"agent_lost"})


@dataclass
class ServiceConfig:
    pool: str
    instance: str = "main"
    max_attempts: int = 3
    heartbeat_timeout_s: float = 15.0
    result_grace_s: float = 30.0
    housekeeping_interval_s: float = 0.5
    policy_refresh_s: float = 1.0
    read_count: int = 1024
    block_ms: int = 100
    # Store calls on the event loop's own thread instead of a thread of their own
    # (workers/threads.py ``InlineCalls``): for a process that runs nothing but this service,
    # whose store may be called from its loop (``run_scheduler`` allows Django to be).
    store_inline: bool = False


@dataclass
class _Active:
    record: ActionRecord
    attempt: int = 0
    node: str | None = None
    deadline: float | None = None
    cancel_requested: bool = False
    seen_running: bool = False


@dataclass
class _Batch:
    finished: list[FinishUpdate] = field(default_factory=list)
    requeued: list[RequeueUpdate] = field(default_factory=list)
    cancels: list[tuple[str, Cancel]] = field(default_factory=list)


SnapshotPublisher = Callable[[str, dict[str, Any]], Awaitable[None]]


class SchedulerService:
    def __init__(
        self,
        *,
        config: ServiceConfig,
        transport: Transport,
        store: ActionStore,
        streams: StreamNames | None = None,
        publish_snapshot: SnapshotPublisher | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.transport = transport
        self.store = store
        self.streams = streams or StreamNames()
        self.publish_snapshot = publish_snapshot
        self.clock = clock
        self.scheduler: ElasticScheduler | None = None
        self.kind = "cpu"
        self.active: dict[str, _Active] = {}
        self.nodes: dict[str, NodeRegister] = {}
        self.last_seen: dict[str, float] = {}
        self.policy_version: int | None = None  # the version the scheduler runs
        # The last version it refused, with why: it keeps running the one before (never a crash).
        self.policy_rejected: dict[str, Any] | None = None
        self._policy_seen: int | None = None
        self.pass_failures = 0
        self.last_pass_error: dict[str, Any] | None = None
        self.dispatched = 0
        self.completed = 0
        self.started = asyncio.Event()
        self._api_round_robin = 0
        self._orphan_failures: list[FinishUpdate] = []
        self.draining: set[str] = set()
        self._offline: list[str] = []
        self._consumer = f"scheduler:{config.instance}"
        self._events = self.streams.events(config.pool)
        # Event batches and housekeeping passes never interleave (both touch the same state).
        self._lock = asyncio.Lock()
        # Store calls run on a thread of their own (workers/threads.py): one is enough (the
        # service is serial) and keeps one database connection. Or, in a process of its own, on
        # the loop's thread: the loop waits for each store call anyway, so the hand-over is waste.
        self._store_calls: BlockingCalls = (
            InlineCalls() if config.store_inline else OwnThreads(1, f"loom-store-{config.pool}")
        )
        self._broken = False  # a pass failed half-way: rebuild from the store before going on
        self.recoveries = 0

    # --- lifecycle ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Rebuild, then serve until ``stop`` is set.

        A batch that fails half-way (the database or Redis went away) leaves memory ahead of the
        store; the service then does what a restart would — rebuilds from the store and re-reads
        its unacknowledged events — with a growing back-off, instead of dying in a live process.
        """
        async with self._lock:
            await self.rebuild()
        housekeeping = asyncio.create_task(self._housekeeping_loop(stop))
        backoff = 0.05
        try:
            while not stop.is_set():
                try:
                    if self._broken:
                        await asyncio.sleep(backoff)
                        async with self._lock:
                            await self._recover()
                    deliveries = await self.transport.read(
                        self._events,
                        SCHEDULER_GROUP,
                        self._consumer,
                        count=self.config.read_count,
                        block_ms=self.config.block_ms,
                    )
                    if deliveries:
                        async with self._lock:
                            await self.handle(deliveries)
                    backoff = 0.05
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(
                        "pool %s: a batch failed; rebuilding from the store", self.config.pool
                    )
                    self._broken = True
                    backoff = min(backoff * 2, 5.0)
        finally:
            housekeeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await housekeeping
            self._store_calls.close()

    async def _recover(self) -> None:
        """Forget the in-memory state and rebuild it as a restarted process would."""
        self.scheduler = None
        self.active = {}
        self.nodes = {}
        self.last_seen = {}
        self.policy_version = None
        self._policy_seen = None
        self._orphan_failures = []
        self._offline = []
        self._broken = False
        self.recoveries += 1
        try:
            await self.rebuild()
        except Exception:
            self._broken = True
            raise

    async def rebuild(self) -> None:
        """State from the store plus this group's unacknowledged events (crash recovery)."""
        pool = self.config.pool
        await self.transport.ensure_group(self._events, SCHEDULER_GROUP)
        self.kind = await self._store_calls.run(self.store.pool_kind, pool)
        for register in await self._store_calls.run(self.store.load_nodes, pool):
            self.nodes[register.node_id] = register
            self.last_seen[register.node_id] = self.clock()
        self.scheduler = ElasticScheduler(await self._build_topology())
        await self._refresh_policy()
        self.draining = set()  # a fresh topology: apply the drains again
        await self._refresh_drains()
        now = self.clock()
        redispatch: list[tuple[_Active, Assignment]] = []
        records = await self._store_calls.run(self.store.load_active, pool)
        for record in records:
            if record.status == "queued":
                self._submit(record, now)
            elif record.allocation and record.node in self.nodes:
                restored = self._restore(record, now)
                if restored is not None:
                    redispatch.append(restored)
            else:
                # Its node is gone: run it again elsewhere (or fail it) like any lost agent.
                self.active[spec_id(record.action_id)] = _Active(record, record.attempts)
        lost = [a for a in self.active.values() if a.node is None and a.record.status != "queued"]
        batch = _Batch()
        for active in lost:
            self._lose(active, batch, now, "node gone while the scheduler was down")
        await self._publish_dispatches([(a, asg, a.attempt) for a, asg in redispatch])
        pending = await self.transport.reclaim(
            self._events, SCHEDULER_GROUP, self._consumer, min_idle_ms=0, count=100_000
        )
        await self.handle(pending, batch, trust_records=False)
        self.started.set()
        log.info(
            "pool %s rebuilt: %d waiting, %d running, %d nodes",
            pool,
            self.scheduler.waiting_count,
            self.scheduler.running_count,
            len(self.nodes),
        )

    # --- one batch of events -------------------------------------------------------------------

    async def handle(
        self,
        deliveries: Sequence[Delivery],
        batch: _Batch | None = None,
        *,
        trust_records: bool = True,
    ) -> None:
        """One batch of events. ``trust_records``: queue the records a submission carries as
        they are (a live event); a rebuild passes False and reads the rows instead, since an
        event re-read after a crash may describe an action that has ended since."""
        batch = batch or _Batch()
        now = self.clock()
        submitted: list[int] = []
        carried: dict[int, ActionRecord] = {}
        heartbeats: list[str] = []
        executing: list[int] = []
        for delivery in deliveries:
            message = delivery.message
            if isinstance(message, ActionsSubmitted):
                submitted.extend(message.action_ids)
                if trust_records:
                    carried.update(_carried_records(message))
            elif isinstance(message, ActionResult):
                self._on_result(message, batch, now)
            elif isinstance(message, ActionsCancelled):
                self._on_cancelled(message.action_ids, batch, now)
            elif isinstance(message, Heartbeat):
                self.last_seen[message.node_id] = now
                heartbeats.append(message.node_id)
                executing.extend(self._newly_running(message.running))
            elif isinstance(message, NodeRegister):
                await self._on_register(message, now)
        if submitted:
            # An id announced twice (two messages in one read) is queued once.
            unknown = [i for i in dict.fromkeys(submitted) if spec_id(i) not in self.active]
            to_load = [i for i in unknown if i not in carried]
            records = [carried[i] for i in unknown if i in carried]
            if to_load:
                records += await self._store_calls.run(
                    self.store.load_queued, self.config.pool, to_load
                )
            for record in sorted(records, key=lambda r: (r.submitted_at, r.action_id)):
                self._submit(record, now)
        if heartbeats:
            await self._store_calls.run(self.store.record_heartbeats, sorted(set(heartbeats)), now)
        if executing:
            await self._store_calls.run(self.store.mark_running, executing, now)
        await self._schedule_and_persist(batch, now)
        if deliveries:
            await self.transport.ack(
                self._events, SCHEDULER_GROUP, [d.entry_id for d in deliveries]
            )

    async def _schedule_and_persist(self, batch: _Batch, now: float) -> None:
        assert self.scheduler is not None
        assignments = self._schedule_pass(now)
        started: list[tuple[_Active, Assignment, int]] = []
        scheduled: list[ScheduledUpdate] = []
        for assignment in assignments:
            active = self.active[assignment.action_id]
            attempt = active.record.attempts + 1
            node = self._node_for(assignment)
            active.attempt, active.node = attempt, node
            active.deadline = now + active.record.timeout_s + self.config.result_grace_s
            allocation = allocation_json(assignment) | {"node": node}
            scheduled.append(
                ScheduledUpdate(active.record.action_id, attempt, node, allocation, now)
            )
            started.append((active, assignment, attempt))
        if scheduled or batch.finished or batch.requeued:
            applied = await self._store_calls.run(
                self.store.apply,
                scheduled=scheduled,
                finished=batch.finished,
                requeued=batch.requeued,
            )
            started = self._only_moved(started, applied.scheduled, now)
        await self._publish_dispatches(started)
        for node, cancel in batch.cancels:
            await self.transport.publish(self.streams.dispatch(node), cancel)

    def _schedule_pass(self, now: float) -> list[Assignment]:
        """One scheduling pass that a bug in the algorithm cannot turn into a crash loop.

        A pass plans without touching state until it starts actions, so when planning raises,
        the same queue is passed again under the plain FCFS-at-minimum baseline (arl-tangram
        §6.4's ``fcfs-min``, no DoP bounds) and the error is reported in the snapshot. If the
        failure left state half-changed (actions started but not returned), or the fallback
        fails too, the error goes up: the service then rebuilds from the store, which still
        holds every such action as queued, so nothing is lost.
        """
        assert self.scheduler is not None
        scheduler = self.scheduler
        running = scheduler.running_count
        try:
            return scheduler.schedule(now)
        except Exception as exc:
            if scheduler.running_count != running:
                raise
            self.pass_failures += 1
            self.last_pass_error = {"at": now, "reason": f"{type(exc).__name__}: {exc}"}
            log.exception("pool %s: a scheduling pass failed; passing again as fcfs-min",
                          self.config.pool)  # fmt: skip
        policy = scheduler.policy()
        scheduler.set_policy(algorithm="fcfs-min", min_dop=None, max_dop=None)
        try:
            return scheduler.schedule(now)
        finally:
            scheduler.set_policy(**policy)

    def _only_moved(
        self, started: list[tuple[_Active, Assignment, int]], moved: frozenset[int], now: float
    ) -> list[tuple[_Active, Assignment, int]]:
        """Keep the assignments the store moved queued → scheduled; forget the others (cancelled
        or ended after this service queued them): they are never dispatched."""
        assert self.scheduler is not None
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

    async def _publish_dispatches(self, started: Sequence[tuple[_Active, Assignment, int]]) -> None:
        by_node: dict[str, list[Dispatch]] = defaultdict(list)
        for active, assignment, attempt in started:
            node = active.node or assignment.node
            by_node[node].append(
                dispatch_for(active.record, attempt=attempt, cores=tuple(assignment.core_ids))
            )
        for node, dispatches in by_node.items():
            await self.transport.publish_many(self.streams.dispatch(node), dispatches)
            self.dispatched += len(dispatches)

    # --- event handlers ------------------------------------------------------------------------

    def _submit(self, record: ActionRecord, now: float) -> None:
        assert self.scheduler is not None
        key = spec_id(record.action_id)
        try:
            self.scheduler.submit(action_spec(record), now)
        except ValueError as exc:
            # A demand this pool can never meet: end it now with the reason, never leave it queued.
            self.active[key] = _Active(record)
            self._orphan_failures.append(
                FinishUpdate(record.action_id, record.attempts, "failed", now, reason=str(exc))
            )
            return
        self.active[key] = _Active(record)

    def _restore(self, record: ActionRecord, now: float) -> tuple[_Active, Assignment] | None:
        assert self.scheduler is not None and record.allocation is not None
        allocation = record.allocation
        assignment = self.scheduler.restore(
            action_spec(record),
            node=str(allocation.get("node", record.node)),
            units={k: int(v) for k, v in (allocation.get("units") or {}).items()},
            core_ids=tuple(int(c) for c in allocation.get("cores") or ()),
            submitted_at=record.submitted_at,
            now=now,
        )
        active = _Active(
            record,
            attempt=record.attempts,
            node=record.node,
            deadline=now + record.timeout_s + self.config.result_grace_s,
        )
        self.active[spec_id(record.action_id)] = active
        return active, assignment

    def _on_result(self, result: ActionResult, batch: _Batch, now: float) -> None:
        assert self.scheduler is not None
        active = self.active.get(result.action_id)
        if active is None or active.attempt != result.attempt:
            return  # a stale attempt, or an action that already ended: nothing to do
        if result.status == "failed" and result.reason in RETRYABLE_REASONS:
            self._lose(active, batch, now, f"{result.reason} on {result.node_id}")
            return
        self.scheduler.complete(result.action_id, now)
        del self.active[result.action_id]
        self.completed += 1
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
            )
        )

    def _on_cancelled(self, action_ids: Sequence[int], batch: _Batch, now: float) -> None:
        """The API already marked them cancelled; stop what runs, forget what waits."""
        assert self.scheduler is not None
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

    async def _on_register(self, register: NodeRegister, now: float) -> None:
        await self._store_calls.run(self.store.upsert_node, register)
        self.last_seen[register.node_id] = now
        known = register.node_id in self.nodes
        self.nodes[register.node_id] = register
        if self.kind == "cpu" and self.scheduler is not None:
            topology = self.scheduler.topology
            assert isinstance(topology, CpuTopology)
            if known:
                topology.set_node_available(register.node_id, register.node_id not in self.draining)
            else:
                topology.add_node(_cpu_node_spec(register))

    def _lose(self, active: _Active, batch: _Batch, now: float, why: str) -> None:
        """An attempt's agent is gone: retry elsewhere while attempts remain, else fail it."""
        assert self.scheduler is not None
        key = spec_id(active.record.action_id)
        self.scheduler.cancel(key, now)
        attempts = max(active.attempt, active.record.attempts)
        if attempts < self.config.max_attempts:
            record = _with_attempts(active.record, attempts)
            batch.requeued.append(RequeueUpdate(record.action_id, reason=why))
            del self.active[key]
            self._submit(record, now)
        else:
            del self.active[key]
            reason = f"agent_lost: {why} (after {attempts} attempts)"
            batch.finished.append(
                FinishUpdate(active.record.action_id, attempts, "failed", now, reason=reason)
            )
            log.warning("action %s failed: %s", key, reason)

    # --- housekeeping: lost nodes, overdue results, policy, snapshots ----------------------------

    async def _housekeeping_loop(self, stop: asyncio.Event) -> None:
        last_policy = 0.0
        while not stop.is_set():
            await asyncio.sleep(self.config.housekeeping_interval_s)
            if self._broken:
                continue  # the main loop rebuilds first
            refresh = self.clock() - last_policy >= self.config.policy_refresh_s
            try:
                async with self._lock:
                    await self._housekeeping_pass(refresh)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("pool %s: housekeeping failed; rebuilding", self.config.pool)
                self._broken = True
            else:
                if refresh:
                    last_policy = self.clock()

    async def _housekeeping_pass(self, refresh_policy: bool) -> None:
        now = self.clock()
        batch = _Batch()
        batch.finished.extend(self._drain_orphans())
        self._check_nodes(batch, now)
        if self._offline:
            offline, self._offline = self._offline, []
            await self._store_calls.run(self.store.mark_nodes_offline, offline)
        self._check_deadlines(batch, now)
        if refresh_policy:
            await self._refresh_policy()
            await self._refresh_drains()
        await self._schedule_and_persist(batch, now)
        if self.publish_snapshot is not None:
            await self.publish_snapshot(self.config.pool, self.snapshot(now))

    def _check_nodes(self, batch: _Batch, now: float) -> None:
        timeout = self.config.heartbeat_timeout_s
        lost = [n for n, seen in self.last_seen.items() if now - seen > timeout]
        for node in lost:
            del self.last_seen[node]
            log.warning("node %s missed heartbeats for %.0f s: lost", node, timeout)
            if self.kind == "cpu" and self.scheduler is not None:
                topology = self.scheduler.topology
                assert isinstance(topology, CpuTopology)
                topology.set_node_available(node, False)
            # Only idempotent actions move on: silence is no proof that an attempt stopped (a node
            # cut off from Redis still runs it), so a non-idempotent one, which runs at most
            # once, waits for its node's answer (or a reclaiming agent's agent_lost) until its
            # deadline (_check_deadlines).
            retried = [a for a in self.active.values() if a.node == node and a.record.idempotent]
            for active in retried:
                self._lose(active, batch, now, f"node {node} stopped heartbeating")
        if lost:
            self._offline.extend(lost)

    def _check_deadlines(self, batch: _Batch, now: float) -> None:
        """A live agent that never answers still cannot keep an action forever."""
        assert self.scheduler is not None
        for key, active in list(self.active.items()):
            if active.deadline is None or now <= active.deadline or active.node is None:
                continue
            self.scheduler.complete(key, now)
            del self.active[key]
            batch.cancels.append((active.node, Cancel(action_id=key, attempt=active.attempt)))
            if active.node not in self.last_seen:  # its node fell silent and is still gone
                status, reason = (
                    "failed",
                    (
                        f"agent_lost: node {active.node} stopped heartbeating and never answered; "
                        "not run again elsewhere (the tool is not idempotent)"
                    ),
                )
            else:
                status, reason = (
                    "timed_out",
                    (
                        f"timeout: no result from {active.node} within the timeout plus "
                        f"{self.config.result_grace_s:.0f} s"
                    ),
                )
            batch.finished.append(
                FinishUpdate(active.record.action_id, active.attempt, status, now, reason=reason)
            )

    async def _refresh_drains(self) -> None:
        """Operators drain nodes from the dashboard: running actions finish, nothing new lands."""
        draining = await self._store_calls.run(self.store.draining_nodes, self.config.pool)
        if draining == self.draining:
            return
        if self.kind == "cpu" and self.scheduler is not None:
            topology = self.scheduler.topology
            assert isinstance(topology, CpuTopology)
            for node in draining - self.draining:
                if node in topology.nodes:
                    topology.set_node_available(node, False)
            for node in self.draining - draining:
                if node in topology.nodes and node in self.last_seen:
                    topology.set_node_available(node, True)
        log.info("pool %s: draining %s", self.config.pool, sorted(draining) or "no node")
        self.draining = draining

    async def _refresh_policy(self) -> None:
        assert self.scheduler is not None
        loaded = await self._store_calls.run(self.store.load_policy, self.config.pool)
        if loaded is None or loaded[0] == self._policy_seen:
            return
        version, settings = loaded
        self._policy_seen = version
        reason = policy_apply(self.scheduler, settings)
        if reason is not None:
            # Kept on the version it runs; the dashboard shows why the new one was refused.
            self.policy_rejected = {"version": version, "reason": reason}
            log.error("pool %s: policy v%s rejected, still running v%s: %s",
                      self.config.pool, version, self.policy_version, reason)  # fmt: skip
            return
        self.policy_version = version
        self.policy_rejected = None
        log.info("pool %s now runs policy v%s: %s", self.config.pool, version, settings)

    def snapshot(self, now: float) -> dict[str, Any]:
        """Compact state for the dashboard (published a few times per second at most)."""
        assert self.scheduler is not None
        return {
            "pool": self.config.pool,
            "at": now,
            "waiting": self.scheduler.waiting_count,
            "running": self.scheduler.running_count,
            "head_wait_reason": self.scheduler.head_wait_reason(),
            "dispatched": self.dispatched,
            "completed": self.completed,
            "policy_version": self.policy_version,
            "policy_rejected": self.policy_rejected,
            "pass_failures": self.pass_failures,
            "last_pass_error": self.last_pass_error,
            "nodes": self.scheduler.holdings(),
        }

    # --- helpers ---------------------------------------------------------------------------------

    def _newly_running(self, keys: Sequence[str]) -> list[int]:
        """Heartbeats list ``action:attempt`` keys; the first sighting marks an action running."""
        found: list[int] = []
        for key in keys:
            action_key, _, attempt = key.partition(":")
            active = self.active.get(action_key)
            if active is not None and not active.seen_running and str(active.attempt) == attempt:
                active.seen_running = True
                found.append(active.record.action_id)
        return found

    def _drain_orphans(self) -> list[FinishUpdate]:
        drained, self._orphan_failures = self._orphan_failures, []
        for update in drained:
            self.active.pop(spec_id(update.action_id), None)
        return drained

    def _node_for(self, assignment: Assignment) -> str:
        if self.kind != "api":
            return assignment.node
        live = sorted(n for n in self.nodes if n in self.last_seen and n not in self.draining)
        if not live:
            return assignment.node
        self._api_round_robin = (self._api_round_robin + 1) % len(live)
        return live[self._api_round_robin]

    async def _build_topology(self) -> Topology:
        if self.kind == "api":
            limits = await self._store_calls.run(self.store.api_limits, self.config.pool)
            return BasicTopology(
                {
                    name: BasicLimit(concurrency=c, quota=q, period_s=p or 60.0)
                    for name, (c, q, p) in limits.items()
                }
            )
        if self.kind == "cpu":
            return CpuTopology([_cpu_node_spec(r) for r in self.nodes.values()])
        raise LookupError(f"pool kind {self.kind!r} has no scheduler service yet")


def _carried_records(message: ActionsSubmitted) -> dict[int, ActionRecord]:
    """The records a submission carries; one that does not parse is loaded from the store."""
    records = {}
    for raw in message.records:
        try:
            record = ActionRecord(**raw)
        except TypeError:
            log.warning(
                "a submitted record does not parse; loading action %s", raw.get("action_id")
            )
            continue
        records[record.action_id] = record
    return records


def _cpu_node_spec(register: NodeRegister) -> CpuNodeSpec:
    numa = register.numa or {0: register.cores}
    groups = tuple(tuple(cores) for _, cores in sorted(numa.items()))
    return CpuNodeSpec(name=register.node_id, numa_cores=groups, memory_mb=register.memory_mb)


def _with_attempts(record: ActionRecord, attempts: int) -> ActionRecord:
    return replace(record, attempts=attempts, status="queued", node=None, allocation=None)
