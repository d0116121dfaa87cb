"""Where a step's request goes and at what priority: Heddle, and the two baselines.

- :class:`RoundRobinPolicy` — each request to the next available worker (the SGLang router's
  ``round_robin``), priority 0.
- :class:`LeastLoadPolicy` — the worker with the fewest requests in flight through this router,
  priority 0.
- :class:`HeddlePolicy` (heddle §4.2, §5.2–§5.3), from ``workers.algorithms.heddle``:
  *PPS priority* — the predicted total length, longest first (:func:`request_priority`), passed
  to the engine's ``priority`` field; *presorted-DP placement* — :func:`place_trajectories` over
  the active trajectories' predicted lengths gives the group sizes (longest trajectories on the
  first workers, contiguous groups); a step is routed by its trajectory's rank among the active
  ones through :func:`migration_target` (the DP's sizes scaled to the active count, §5.3), so the
  DP is re-solved only when the active set has changed by ``replan_fraction`` or after
  ``replan_s``, not per request, and then at the loop's next turn, once the request that found
  the plan stale has been written to its worker (Loom's own: that request routes on the plan it
  found, the next ones on the new plan; only a policy with no plan for the current worker count
  plans on the request path). A worker's cost profile depends only on the active count, so it is
  kept per count instead of rebuilt at every re-plan (most of a re-plan's time). A trajectory
  keeps its worker (prefix cache) unless its rank says otherwise at a step start — which is
  after a tool call, the moment §5.3 migrates: with engines that cannot move KV the migration is
  a re-route, the new worker recomputing the prefix.
  ``group_limit`` caps the trajectories one worker's group may hold (the DP's group limit, §5.2:
  a worker's KV capacity in trajectories); without it a group is bounded by cost alone.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence
from typing import Protocol

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.migration import migration_target
from workers.algorithms.heddle.parallelism import worker_cost
from workers.algorithms.heddle.placement import (
    WorkerCost,
    homogeneous_workers,
    place_trajectories,
)
from workers.algorithms.heddle.priority import PriorityPolicy, request_priority
from workers.router.pool import LLMWorker
from workers.router.trajectories import TrajectoryState

COSTS_KEPT = 64  # worker cost profiles kept (one per active count seen); then they restart


class RoutingPolicy(Protocol):
    name: str

    def choose(self, state: TrajectoryState, workers: Sequence[LLMWorker]) -> LLMWorker:
        """A worker for the trajectory's next step (``workers``: the available ones, non-empty)."""
        ...

    def priority(self, state: TrajectoryState) -> int: ...

    def forget(self, state: TrajectoryState) -> None:
        """The trajectory ended."""
        ...


class RoundRobinPolicy:
    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(self, state: TrajectoryState, workers: Sequence[LLMWorker]) -> LLMWorker:
        worker = workers[self._next % len(workers)]
        self._next += 1
        return worker

    def priority(self, state: TrajectoryState) -> int:
        return 0

    def forget(self, state: TrajectoryState) -> None:
        return None


class LeastLoadPolicy:
    name = "least_load"

    def choose(self, state: TrajectoryState, workers: Sequence[LLMWorker]) -> LLMWorker:
        return min(workers, key=lambda w: (len(w.in_flight), len(w.trajectories)))

    def priority(self, state: TrajectoryState) -> int:
        return 0

    def forget(self, state: TrajectoryState) -> None:
        return None


class HeddlePolicy:
    """PPS priority and presorted-DP placement with rank-based re-routing (module docstring)."""

    name = "heddle"

    def __init__(
        self,
        *,
        model: MPLatencyModel | None = None,
        mp: int = 1,
        batch_limit: int = 256,
        group_limit: int | None = None,
        replan_fraction: float = 0.25,
        replan_s: float = 1.0,
        max_items: int = 256,
    ) -> None:
        self.model = model or MPLatencyModel()
        self.mp = mp
        self.batch_limit = batch_limit
        self.group_limit = group_limit
        self.replan_fraction = replan_fraction
        self.replan_s = replan_s
        self.max_items = max_items
        self._ranked: list[tuple[float, str]] = []  # (−predicted total, id): longest first
        self._key: dict[str, tuple[float, str]] = {}
        self.group_sizes: tuple[int, ...] = ()
        self._planned_count = 0
        self._planned_workers = 0
        self._planned_at = 0.0
        self._targets: dict[tuple[int, int], int] = {}  # (rank, active) → group, this plan
        self._costs: dict[tuple[int, int | None], WorkerCost] = {}  # (active, group limit) → cost
        self._replan_due = False  # a re-plan is scheduled for the loop's next turn
        self.replans = 0

    # ------------------------------------------------------------------ ranking
    def _rank(self, state: TrajectoryState) -> int:
        """Insert or move the trajectory in the longest-first order; return its rank."""
        key = (-state.predicted_total, state.trajectory_id)
        old = self._key.get(state.trajectory_id)
        if old != key:
            if old is not None:
                index = bisect.bisect_left(self._ranked, old)
                if index < len(self._ranked) and self._ranked[index] == old:
                    del self._ranked[index]
            bisect.insort(self._ranked, key)
            self._key[state.trajectory_id] = key
        return bisect.bisect_left(self._ranked, key)

    def forget(self, state: TrajectoryState) -> None:
        old = self._key.pop(state.trajectory_id, None)
        if old is not None:
            index = bisect.bisect_left(self._ranked, old)
            if index < len(self._ranked) and self._ranked[index] == old:
                del self._ranked[index]

    # ------------------------------------------------------------------ placement
    def _cost(self, active: int, group_limit: int | None) -> WorkerCost:
        """One worker's cost profile for ``active`` trajectories (a pure function of it)."""
        cost = self._costs.get((active, group_limit))
        if cost is None:
            if len(self._costs) >= COSTS_KEPT:
                self._costs.clear()
            cost = worker_cost(
                self.model, self.mp, active, batch_limit=self.batch_limit, group_limit=group_limit
            )
            self._costs[active, group_limit] = cost
        return cost

    def _replan(self, workers: int) -> None:
        """heddle formula 3 over the active trajectories' predicted totals."""
        self._replan_due = False
        lengths = [-key[0] for key in self._ranked]
        group_limit = self.group_limit
        if group_limit is not None:  # more trajectories than the limits hold: spread them evenly
            group_limit = max(group_limit, -(-len(lengths) // workers))
        cost = self._cost(len(lengths), group_limit)
        placement = place_trajectories(
            lengths, homogeneous_workers(cost, workers), max_items=self.max_items
        )
        self.group_sizes = placement.group_sizes
        self._targets.clear()
        self._planned_count = len(lengths)
        self._planned_workers = workers
        self._planned_at = time.monotonic()
        self.replans += 1

    def _stale(self, workers: int) -> bool:
        if workers != self._planned_workers or not self.group_sizes:
            return True
        active = len(self._ranked)
        changed = abs(active - self._planned_count) > self.replan_fraction * max(
            self._planned_count, 1
        )
        return changed or time.monotonic() - self._planned_at > self.replan_s

    def _replan_later(self, workers: int) -> None:
        """Re-plan at the loop's next turn, after the current request went out (module
        docstring); at once outside a running loop."""
        if self._replan_due:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._replan(workers)
            return
        self._replan_due = True
        loop.call_soon(self._replan_if_stale)

    def _replan_if_stale(self) -> None:
        self._replan_due = False
        if self._stale(self._planned_workers):
            self._replan(self._planned_workers)

    def choose(self, state: TrajectoryState, workers: Sequence[LLMWorker]) -> LLMWorker:
        rank = self._rank(state)
        if len(workers) != self._planned_workers or not self.group_sizes:
            self._replan(len(workers))  # no plan for this many workers: one is needed now
        elif self._stale(len(workers)):
            self._replan_later(len(workers))
        active = len(self._ranked)
        group = self._targets.get((rank, active))
        if group is None:
            group = self._targets[rank, active] = migration_target(rank, self.group_sizes, active)
        target = workers[min(group, len(workers) - 1)]
        if state.worker is not None and state.worker != target.name:
            state.migrations += 1
        return target

    def priority(self, state: TrajectoryState) -> int:
        return round(
            request_priority(
                PriorityPolicy.PPS,
                predicted_total_tokens=state.predicted_total,
                trajectory_arrival=state.created_at,
                step_submitted_at=time.monotonic(),
            )
        )


POLICIES = {"heddle": HeddlePolicy, "round_robin": RoundRobinPolicy, "least_load": LeastLoadPolicy}


def make_policy(
    name: str, *, batch_limit: int = 256, group_limit: int | None = None
) -> RoutingPolicy:
    if name == "heddle":
        return HeddlePolicy(batch_limit=batch_limit, group_limit=group_limit)
    if name == "round_robin":
        return RoundRobinPolicy()
    if name == "least_load":
        return LeastLoadPolicy()
    raise ValueError(f"unknown routing policy {name!r}; choose from {', '.join(POLICIES)}")
