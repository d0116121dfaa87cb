"""The per-pool scheduler service (arl-tangram §3 "action scheduler"): the event loop.

One asyncio task reads the pool's event stream in batches (submissions, agent results, node
registrations and heartbeats, cancellations) and, per batch: feeds the actions' ledger (over the
shared ``ElasticScheduler``), runs one scheduling pass, persists the batch's state changes in one
store transaction, publishes the dispatches, then acknowledges the batch. A housekeeping task
finds lost nodes and overdue results, refreshes the policy and the drains, and publishes the
dashboard's snapshot. Persisting *before* dispatching and acknowledging *after* persisting is
what makes a ``kill -9`` at any point safe (``recovery``).

The parts: ``ledger`` (the actions in memory, losses, deadlines, the pass), ``dispatcher``
(persist, then dispatch), ``nodes`` (node health and drains), ``policy`` (a policy it cannot
apply is refused and reported, never a crash), ``recovery`` (the state rebuilt from the store).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from workers.algorithms.tangram import ElasticScheduler
from workers.cancelling import cancel_all_and_wait
from workers.scheduler.config import ServiceConfig
from workers.scheduler.dispatcher import Dispatcher
from workers.scheduler.gc_tuning import freeze_after_start_up
from workers.scheduler.ledger import ActiveAction, Batch, Counters
from workers.scheduler.policy import PolicyTracker
from workers.scheduler.records import ActionRecord
from workers.scheduler.recovery import PoolState, pool_state_load
from workers.scheduler.specs import carried_records, spec_id
from workers.scheduler.store import ActionStore
from workers.threads import BlockingCalls, InlineCalls, OwnThreads
from workers.transport import (
    SCHEDULER_GROUP,
    ActionResult,
    ActionsCancelled,
    ActionsSubmitted,
    Delivery,
    Heartbeat,
    NodeRegister,
    StreamNames,
    Transport,
)

__all__ = ["SchedulerService", "ServiceConfig", "SnapshotPublisher"]

log = logging.getLogger("loom.scheduler")

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
        self.state: PoolState | None = None  # built by ``rebuild``
        self.counters = Counters()
        self.policy = PolicyTracker(config.pool)
        self.started = asyncio.Event()
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
        self.dispatcher = Dispatcher(
            transport=transport,
            streams=self.streams,
            store=store,
            calls=self._store_calls,
            counters=self.counters,
        )

    # --- the state callers read (counters: ``counters``; the policy: ``policy``) -------------

    @property
    def scheduler(self) -> ElasticScheduler | None:
        return self.state.scheduler if self.state is not None else None

    @property
    def active(self) -> dict[str, ActiveAction]:
        return self.state.ledger.active if self.state is not None else {}

    @property
    def draining(self) -> set[str]:
        return self.state.nodes.draining if self.state is not None else set()

    # --- lifecycle --------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Rebuild, then serve until ``stop`` is set.

        A batch that fails half-way (the database or Redis went away) leaves memory ahead of the
        store; the service then does what a restart would — rebuilds from the store and re-reads
        its unacknowledged events — with a growing back-off, instead of dying in a live process.
        """
        async with self._lock:
            await self.rebuild()
        if self.config.freeze_gc_after_start_up:
            freeze_after_start_up()
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
            await cancel_all_and_wait((housekeeping,))
            self._store_calls.close()

    async def _recover(self) -> None:
        """Forget the in-memory state and rebuild it as a restarted process would."""
        self.state = None
        self.policy.forget()
        self._broken = False
        self.counters.recoveries += 1
        try:
            await self.rebuild()
        except Exception:
            self._broken = True
            raise

    async def rebuild(self) -> None:
        """State from the store plus this group's unacknowledged events (crash recovery)."""
        await self.transport.ensure_group(self._events, SCHEDULER_GROUP)
        rebuilt = await pool_state_load(
            config=self.config,
            store=self.store,
            calls=self._store_calls,
            clock=self.clock,
            counters=self.counters,
            policy=self.policy,
        )
        self.state = state = rebuilt.state
        await self.dispatcher.publish(rebuilt.redispatch)
        pending = await self.transport.reclaim(
            self._events, SCHEDULER_GROUP, self._consumer, min_idle_ms=0, count=100_000
        )
        await self.handle(pending, rebuilt.batch, trust_records=False)
        self.started.set()
        log.info(
            "pool %s rebuilt: %d waiting, %d running, %d nodes",
            self.config.pool,
            state.scheduler.waiting_count,
            state.scheduler.running_count,
            len(state.nodes.nodes),
        )

    def _state(self) -> PoolState:
        assert self.state is not None, "the service has not rebuilt its state yet"
        return self.state

    # --- one batch of events ----------------------------------------------------------------

    async def handle(
        self,
        deliveries: Sequence[Delivery],
        batch: Batch | None = None,
        *,
        trust_records: bool = True,
    ) -> None:
        """One batch of events. ``trust_records``: queue the records a submission carries as
        they are (a live event); a rebuild passes False and reads the rows instead, since an
        event re-read after a crash may describe an action that has ended since."""
        state = self._state()
        ledger = state.ledger
        batch = batch or Batch()
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
                    carried.update(carried_records(message))
            elif isinstance(message, ActionResult):
                ledger.on_result(message, batch, now)
            elif isinstance(message, ActionsCancelled):
                ledger.on_cancelled(message.action_ids, batch, now)
            elif isinstance(message, Heartbeat):
                cached = state.nodes.heartbeat(message.node_id, now, message.cache)
                if cached is not None:  # a GPU node's service cache changed (arl-tangram §5.3)
                    await self._store_calls.run(self.store.upsert_node, cached)
                heartbeats.append(message.node_id)
                executing.extend(ledger.newly_running(message.running))
            elif isinstance(message, NodeRegister):
                await self._store_calls.run(self.store.upsert_node, message)
                state.nodes.register(message, now)
        if submitted:
            await self._queue_submitted(submitted, carried, now)
        if heartbeats:
            await self._store_calls.run(self.store.record_heartbeats, sorted(set(heartbeats)), now)
        if executing:
            await self._store_calls.run(self.store.mark_running, executing, now)
        await self.dispatcher.pass_and_persist(state, batch, now)
        if deliveries:
            await self.transport.ack(
                self._events, SCHEDULER_GROUP, [d.entry_id for d in deliveries]
            )

    async def _queue_submitted(
        self, submitted: Sequence[int], carried: dict[int, ActionRecord], now: float
    ) -> int:
        """Queue the announced actions this service does not hold yet: from the records their
        announcement carried, else read from the store (still queued ones only). An id announced
        twice is queued once; one that has ended since is never dispatched (``only_moved``)."""
        ledger = self._state().ledger
        unknown = [i for i in dict.fromkeys(submitted) if spec_id(i) not in ledger.active]
        to_load = [i for i in unknown if i not in carried]
        records = [carried[i] for i in unknown if i in carried]
        if to_load:
            records += await self._store_calls.run(
                self.store.load_queued, self.config.pool, to_load
            )
        for record in sorted(records, key=lambda r: (r.submitted_at, r.action_id)):
            ledger.submit(record, now)
        return len(records)

    async def _sweep_unannounced(self, now: float) -> None:
        """Queue the store's queued actions whose announcement never came: the web process died
        between its commit and its publish, and its client did not send the batch again. A
        restart would load them (``rebuild``); a live service looks for them now and then."""
        queued = await self._store_calls.run(
            self.store.queued_ids, self.config.pool, now - self.config.orphan_min_age_s
        )
        found = await self._queue_submitted(queued, {}, now)
        if found:
            self.counters.unannounced_found += found
            log.warning("pool %s: %d queued actions were never announced; queued now",
                        self.config.pool, found)  # fmt: skip

    # --- housekeeping: lost nodes, overdue results, policy, snapshots -----------------------

    async def _housekeeping_loop(self, stop: asyncio.Event) -> None:
        last_policy = 0.0
        last_sweep = self.clock()
        while not stop.is_set():
            await asyncio.sleep(self.config.housekeeping_interval_s)
            if self._broken:
                continue  # the main loop rebuilds first
            refresh = self.clock() - last_policy >= self.config.policy_refresh_s
            sweep = self.clock() - last_sweep >= self.config.orphan_sweep_s
            try:
                async with self._lock:
                    if sweep:
                        await self._sweep_unannounced(self.clock())
                        last_sweep = self.clock()
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
        state = self._state()
        now = self.clock()
        batch = Batch()
        batch.finished.extend(state.ledger.drain_orphans())
        lost = state.nodes.lose_silent(now, self.config.heartbeat_timeout_s)
        for node in lost:
            state.ledger.lose_idempotent_on(node, batch, now)
        if lost:
            await self._store_calls.run(self.store.mark_nodes_offline, lost)
        state.ledger.check_deadlines(batch, now, state.nodes.last_seen)
        if refresh_policy:
            pool = self.config.pool
            self.policy.update(
                state.scheduler, await self._store_calls.run(self.store.load_policy, pool)
            )
            state.nodes.apply_drains(await self._store_calls.run(self.store.draining_nodes, pool))
        await self.dispatcher.pass_and_persist(state, batch, now)
        if self.publish_snapshot is not None:
            await self.publish_snapshot(self.config.pool, self.snapshot(now))

    def snapshot(self, now: float) -> dict[str, Any]:
        """Compact state for the dashboard (published a few times per second at most)."""
        scheduler = self._state().scheduler
        return {
            "pool": self.config.pool,
            "at": now,
            "waiting": scheduler.waiting_count,
            "running": scheduler.running_count,
            "head_wait_reason": scheduler.head_wait_reason(),
            "dispatched": self.counters.dispatched,
            "completed": self.counters.completed,
            "policy_version": self.policy.version,
            "policy_rejected": self.policy.rejected,
            "pass_failures": self.counters.pass_failures,
            "last_pass_error": self.counters.last_pass_error,
            "nodes": scheduler.holdings(),
        }
