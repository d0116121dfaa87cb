"""One scheduling pass of a pool, persisted before anything is dispatched.

The order is the service's safety: the pass's queued → scheduled moves, finishes and requeues
are written in one store call first, and only the actions the store really moved are dispatched
(an action cancelled or ended meanwhile is forgotten). A crash between the two leaves them
scheduled in the store, and the rebuild re-dispatches them with the same attempt (``recovery``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from workers.algorithms.tangram import Assignment
from workers.scheduler.ledger import Batch, Counters, Started
from workers.scheduler.recovery import PoolState
from workers.scheduler.specs import dispatch_for
from workers.scheduler.store import ActionStore
from workers.threads import BlockingCalls
from workers.transport import Dispatch, StreamNames, Transport


class Dispatcher:
    def __init__(
        self,
        *,
        transport: Transport,
        streams: StreamNames,
        store: ActionStore,
        calls: BlockingCalls,
        counters: Counters,
    ) -> None:
        self.transport = transport
        self.streams = streams
        self.store = store
        self.calls = calls
        self.counters = counters
        self._api_round_robin = 0

    async def pass_and_persist(self, state: PoolState, batch: Batch, now: float) -> None:
        """Schedule, persist the pass with ``batch`` in one store call, then dispatch and send
        the batch's cancels."""
        started, scheduled = state.ledger.start_pass(
            now, lambda assignment: self._node_for(state, assignment)
        )
        if scheduled or batch.finished or batch.requeued:
            applied = await self.calls.run(
                self.store.apply,
                scheduled=scheduled,
                finished=batch.finished,
                requeued=batch.requeued,
            )
            started = state.ledger.only_moved(started, applied.scheduled, now)
        await self.publish(started)
        for node, cancel in batch.cancels:
            await self.transport.publish(self.streams.dispatch(node), cancel)

    async def publish(self, started: Sequence[Started]) -> None:
        """The dispatches of ``started``, one round trip per node."""
        by_node: dict[str, list[Dispatch]] = defaultdict(list)
        for active, assignment, attempt in started:
            node = active.node or assignment.node
            by_node[node].append(
                dispatch_for(
                    active.record,
                    attempt=attempt,
                    cores=tuple(assignment.core_ids),
                    gpus=tuple(assignment.gpu_ids),
                )
            )
        for node, dispatches in by_node.items():
            await self.transport.publish_many(self.streams.dispatch(node), dispatches)
            self.counters.dispatched += len(dispatches)

    def _node_for(self, state: PoolState, assignment: Assignment) -> str:
        """An API pool's actions take turns over its schedulable nodes (any node can call)."""
        if state.kind != "api":
            return assignment.node
        schedulable = state.nodes.schedulable()
        if not schedulable:
            return assignment.node
        self._api_round_robin = (self._api_round_robin + 1) % len(schedulable)
        return schedulable[self._api_round_robin]
