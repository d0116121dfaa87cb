"""The simulator's prediction for ``router_heddle_live``: the same trace, the same three policies,
the same worker model, on the virtual clock (DESIGN.md "The simulator").

The live policies and their simulated counterparts:

- ``heddle`` — :func:`workers.sim.llm.baselines.heddle` at MP 1 (PPS priority, presorted-DP
  placement, migration at tool calls; heddle §4.2, §5.2–§5.3);
- ``least_load`` — every step to the worker with the fewest requests in flight
  (``PlacementPolicy.LEAST_INFLIGHT``), step-centric FIFO (``PriorityPolicy.ROUND_ROBIN``);
- ``round_robin`` — every step to the next worker in turn, as the router's
  :class:`~workers.router.policies.RoundRobinPolicy` and the SGLang router's ``round_robin``
  do, FIFO. The simulator's rollout has no per-request round-robin placement, so
  :class:`_RoundRobinRollout` supplies it (the one routing decision overridden).

Worker model: the simulator's worker keeps a prefix cache per trajectory (SGLang's radix cache),
as the emulated engine now does (``workers.engine.prefix_cache``); ``prefix_cache=False``
(:class:`_NoPrefixCache`) runs them without one — every step prefills its whole context — the
way the emulated engine served before it kept a cache (``--disable-radix-cache``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from workers.algorithms.heddle.prediction import LengthPredictor, TrajectoryRecord
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.baselines import heddle
from workers.sim.llm.kv import KVPool
from workers.sim.llm.rollout import (
    PlacementPolicy,
    RolloutResult,
    RolloutSimulation,
    Scenario,
    SystemConfig,
    WorkloadHistory,
)

POLICIES = ("heddle", "round_robin", "least_load")


class _NoPrefixCache(KVPool):
    """A KV pool that keeps nothing once a request leaves: the emulated engine's memory."""

    def insert(self, key: str, tokens: int, active: float) -> bool:
        return True


class _Rollout(RolloutSimulation):
    """``prefix_cache=False``: the workers keep no prefix between a trajectory's steps."""

    def __init__(self, *args: Any, prefix_cache: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.prefix_cache = prefix_cache

    def _build_workers(self, initial_totals: np.ndarray) -> None:
        super()._build_workers(initial_totals)
        if not self.prefix_cache:
            for worker in self.workers:
                worker.kv = _NoPrefixCache(
                    worker.kv.capacity, cache_capacity_tokens=0.0, pin_running=False
                )


class _RoundRobinRollout(_Rollout):
    """Every step to the next worker in turn (the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._next_worker = 0

    def _route(self, t: Any) -> int:
        worker = self._next_worker % len(self.workers)
        self._next_worker += 1
        return worker


def systems() -> dict[str, SystemConfig]:
    return {
        "heddle": heddle(mp_degree=1),
        "round_robin": SystemConfig(
            "round_robin", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.LEAST_INFLIGHT, mp_degree=1
        ),
        "least_load": SystemConfig(
            "least_load", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.LEAST_INFLIGHT, mp_degree=1
        ),
    }


def simulate(
    records: Sequence[TrajectoryRecord],
    scenario: Scenario,
    predictor: LengthPredictor,
    history: WorkloadHistory,
    *,
    prefix_cache: bool,
) -> dict[str, RolloutResult]:
    """Each policy on ``records``, one rollout batch each (same trace, scenario, predictor)."""
    results = {}
    for name, system in systems().items():
        kind = _RoundRobinRollout if name == "round_robin" else _Rollout
        simulation = kind(records, system, scenario, predictor, history, prefix_cache=prefix_cache)
        results[name] = simulation.run()
    return results


def summary(result: RolloutResult) -> dict[str, Any]:
    return {
        "makespan_model_s": result.makespan,
        "throughput_tokens_per_model_s": result.throughput,
        "tokens": result.total_tokens,
        "prefill_tokens": result.prefill_tokens,
        "cached_tokens": result.cached_tokens,
        "preemptions": result.preemptions,
        "migrations": result.migrations,
    }
