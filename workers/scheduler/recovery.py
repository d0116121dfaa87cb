"""A pool's in-memory state, rebuilt from the store after a restart (``kill -9`` included).

The service persists a batch's state changes *before* it dispatches them and acknowledges the
batch's events *after* persisting, so the store plus the unacknowledged events hold the whole
truth at every instant. A restarted service (or one whose batch failed half-way, leaving memory
ahead of the store) rebuilds from them: queued → waiting; scheduled or running → running again
on the same units, re-dispatched with the same attempt number; an action whose node is gone →
run again elsewhere (or failed) like any lost agent's. The service then re-reads its
unacknowledged events (``SchedulerService.rebuild``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workers.algorithms.tangram import (
    BasicLimit,
    BasicTopology,
    CpuTopology,
    ElasticScheduler,
    Topology,
)
from workers.scheduler.config import ServiceConfig
from workers.scheduler.gpu_pool import LiveGpuTopology
from workers.scheduler.ledger import ActionLedger, Batch, Counters, Started
from workers.scheduler.nodes import NodeRegistry
from workers.scheduler.policy import PolicyTracker
from workers.scheduler.store import ActionStore
from workers.scheduler.transitions import QUEUED
from workers.threads import BlockingCalls


@dataclass
class PoolState:
    """Everything the service forgets on a restart: the pool's kind, the Tangram scheduler, the
    actions it holds and the nodes it knows."""

    kind: str
    scheduler: ElasticScheduler
    ledger: ActionLedger
    nodes: NodeRegistry


@dataclass
class Rebuilt:
    state: PoolState
    redispatch: list[Started]  # allocated actions re-adopted: dispatched again, same attempt
    batch: Batch  # the losses found: persisted with the batch of unacknowledged events


async def pool_state_load(
    *,
    config: ServiceConfig,
    store: ActionStore,
    calls: BlockingCalls,
    clock: Callable[[], float],
    counters: Counters,
    policy: PolicyTracker,
) -> Rebuilt:
    """The pool's state as the store describes it; the stored policy and drains applied."""
    pool = config.pool
    kind = await calls.run(store.pool_kind, pool)
    nodes = NodeRegistry(pool)
    for register in await calls.run(store.load_nodes, pool):
        nodes.adopt(register, clock())
    scheduler = ElasticScheduler(
        await _topology(kind, nodes, store, calls, pool),
        rest_model=config.rest_model,
        candidate_cap=config.candidate_cap,
    )
    if isinstance(scheduler.topology, CpuTopology):
        nodes.topology = scheduler.topology
    if isinstance(scheduler.topology, LiveGpuTopology):
        nodes.gpu = scheduler.topology  # its service caches: the stored registrations' (§5.3)
    policy.update(scheduler, await calls.run(store.load_policy, pool))
    nodes.apply_drains(await calls.run(store.draining_nodes, pool))
    ledger = ActionLedger(scheduler, config=config, counters=counters)
    now = clock()
    redispatch: list[Started] = []
    gone = []
    for record in await calls.run(store.load_active, pool):
        if record.status == QUEUED:
            ledger.submit(record, now)
        elif record.allocation and record.node in nodes.nodes:
            active, assignment = ledger.restore(record, now)
            redispatch.append((active, assignment, active.attempt))
        else:
            gone.append(ledger.hold(record))
    batch = Batch()
    for active in gone:
        ledger.lose(active, batch, now, "node gone while the scheduler was down")
    return Rebuilt(PoolState(kind, scheduler, ledger, nodes), redispatch, batch)


async def _topology(
    kind: str, nodes: NodeRegistry, store: ActionStore, calls: BlockingCalls, pool: str
) -> Topology:
    if kind == "api":
        # The APIs' stored limits (arl-tangram §5.1); a policy's ``quotas`` may override them.
        limits = await calls.run(store.api_limits, pool)
        return BasicTopology(
            {
                name: BasicLimit(concurrency=concurrency, quota=quota, period_s=period_s or 60.0)
                for name, (concurrency, quota, period_s) in limits.items()
            }
        )
    if kind == "cpu":
        return nodes.cpu_topology()
    if kind == "gpu":
        return nodes.gpu_topology()
    raise LookupError(f"pool kind {kind!r} has no scheduler service yet")
