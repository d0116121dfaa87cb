"""What a Heddle rollout comparison is made of: the system under test, the cluster scenario and
the results (heddle §7). The loop that runs them is :mod:`workers.sim.llm.rollout`."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.placement import GroupModel
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.latency import ContextLatencyModel
from workers.sim.llm.routing import CacheAwareConfig
from workers.sim.llm.timeline import StepTrace

EngineName = Literal["context", "legacy"]
ENGINES: tuple[EngineName, ...] = ("context", "legacy")


class PlacementPolicy(enum.StrEnum):
    STATIC_AFFINITY = "static_affinity"  # verl: each trajectory pinned to one worker
    SGLANG_ROUTER = "sglang_router"  # slime, verl*: sgl-router cache_aware with its thresholds
    CACHE_AWARE = "cache_aware"  # the router's prefix match alone, no load balancing
    LEAST_INFLIGHT = "least_inflight"  # every step to the least in-flight worker
    HEDDLE_DP = "heddle_dp"  # presorted DP at dispatch (+ migration when enabled)


@dataclass(frozen=True)
class SystemConfig:
    """One system under test. ``mp_degree``: homogeneous MP; ``None`` = annealed plan (§6).
    ``router``: the sgl-router thresholds for ``SGLANG_ROUTER``. ``per_degree_profile``: the
    planners (DP, annealer) see one profiled PTL curve per MP degree, else one MP-1 curve and an
    Amdahl κ (``workers.sim.llm.profiler``; the context engine only). ``context_aware_planner``:
    the DP and the annealer charge each member's own growing context (``placement``'s context
    charge, context engine and fluid model only) and the annealer scores plans with the same
    per-degree batch caps as the dispatch-time DP; ``False`` is the earlier planner, whose α was
    profiled at the mean context. ``reprioritize_submitted``: a prediction that lands after its
    step was submitted (a tool call shorter than the predictor's latency) re-keys that request on
    its worker (heddle §4.2); ``False`` is the earlier simulator, where it waited for the next
    step."""

    name: str
    priority: PriorityPolicy = PriorityPolicy.ROUND_ROBIN
    placement: PlacementPolicy = PlacementPolicy.STATIC_AFFINITY
    mp_degree: int | None = 1
    migration: bool = False
    router: CacheAwareConfig = field(default_factory=CacheAwareConfig)
    per_degree_profile: bool = True
    context_aware_planner: bool = True
    reprioritize_submitted: bool = True


@dataclass(frozen=True)
class Scenario:
    """The cluster and the engine shared by all systems in a comparison.

    ``engine``: ``"context"`` (:class:`ContextLatencyModel`: context-dependent step time, chunked
    prefill, KV pool) or ``"legacy"`` (``latency``: per-token time from the batch size only,
    stalling prefill, unbounded KV, ``cache_tokens_per_gpu`` of LRU prefix cache — 400 K tokens
    ≈ 50 GB of an 80 GB H100 after 14B bf16 weights at 160 KiB/token, rounded up).

    Per GPU (a worker of MP ``m`` gets ``m`` times as much): ``max_batch_per_gpu`` running
    requests (heddle §7.1 runs ~100 trajectories per worker; the cap sits under the trajectories
    per worker so requests queue); ``max_trajectories_per_gpu``, the DP's group limit.
    ``prediction_interval``: the predictor service's batching delay, 0.1 s, the low end of heddle
    Table 1's 0.10–0.28 s. ``max_batch_per_worker``: a running-batch cap per worker whatever its
    MP, replacing ``m · max_batch_per_gpu`` (heddle §7.1 fixes the baselines' batch at 100 per
    rollout worker).
    """

    gpu_budget: int = 16
    max_batch_per_gpu: int = 48
    max_trajectories_per_gpu: int = 96
    cache_tokens_per_gpu: float = 400_000.0
    prediction_interval: float = 0.1
    group_model: GroupModel = "fluid"
    engine: EngineName = "context"
    latency: MPLatencyModel = field(default_factory=MPLatencyModel)
    context: ContextLatencyModel = field(default_factory=ContextLatencyModel)
    seed: int = 0
    max_batch_per_worker: int | None = None

    def max_batch(self, mp: int) -> int:
        """The running-batch cap of an MP-``mp`` worker."""
        if self.max_batch_per_worker is not None:
            return self.max_batch_per_worker
        return self.max_batch_per_gpu * mp


@dataclass
class TrajectoryOutcome:
    trajectory_id: str
    total_tokens: int
    steps: int
    finished_at: float = 0.0
    queueing_seconds: float = 0.0
    migration_wait_seconds: float = 0.0
    worker_ids: list[int] = field(default_factory=list)
    timeline: list[StepTrace] = field(default_factory=list)


@dataclass
class RolloutResult:
    system: str
    makespan: float
    total_tokens: int
    mp_degrees: tuple[int, ...]
    outcomes: dict[str, TrajectoryOutcome]
    active_over_time: list[tuple[float, int]]
    prefill_tokens: int
    cached_tokens: int
    preemptions: int
    migrations: int
    kv_preemptions: int = 0
    migrations_refused: int = 0
    router_decisions: dict[str, int] = field(default_factory=dict)
    planner_makespan: float | None = None  # the DP's own estimate at dispatch (heddle §5.2)
    # the DP's time for each worker's group at dispatch, in worker order (empty: no DP)
    planner_group_costs: tuple[float, ...] = ()
    worker_prefill_tokens: tuple[int, ...] = ()  # per worker, in worker order
    worker_output_tokens: tuple[int, ...] = ()

    @property
    def throughput(self) -> float:
        """End-to-end rollout throughput, output tokens per second (heddle §7.1's metric)."""
        return self.total_tokens / self.makespan if self.makespan > 0 else 0.0

    def longest_trajectory(self) -> TrajectoryOutcome:
        return max(self.outcomes.values(), key=lambda o: (o.total_tokens, o.trajectory_id))

    def cache_hit_rate(self) -> float:
        total = self.prefill_tokens + self.cached_tokens
        return self.cached_tokens / total if total else 0.0
