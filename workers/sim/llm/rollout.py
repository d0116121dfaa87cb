"""One synchronous agentic rollout batch over a pool of simulated LLM workers (heddle §7).

Every trajectory starts at t = 0 and alternates generation steps (on an :class:`LLMWorker`) and
tool calls (a pure delay: tools run on elastic serverless backends, heddle §3 "Tool Manager").
A :class:`SystemConfig` picks the three decisions Heddle studies — scheduling (priority policy),
placement (which worker serves each step) and resources (MP degree per worker) — so Heddle and
every baseline run through this one loop, calling the shared algorithms in
``workers.algorithms.heddle``.

Predictions are served like the paper's predictor microservice (§4.1, Table 1): contexts queue up
after each step and are predicted in batches every ``prediction_interval`` seconds; a step starts
with the latest prediction available, and migrations are planned from each batch's results.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.migration import (
    MigrationRequest,
    TransmissionScheduler,
    plan_migrations,
)
from workers.algorithms.heddle.parallelism import plan_parallelism, worker_cost
from workers.algorithms.heddle.placement import GroupModel, WorkerCost, place_trajectories
from workers.algorithms.heddle.prediction import (
    LengthPredictor,
    TrajectoryContext,
    TrajectoryRecord,
)
from workers.algorithms.heddle.priority import PriorityPolicy, request_priority
from workers.sim.events import EventLoop
from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker


class PlacementPolicy(enum.StrEnum):
    STATIC_AFFINITY = "static_affinity"  # verl: each trajectory pinned to one worker, round-robin
    CACHE_AWARE = "cache_aware"  # every step to the worker holding its prefix (ties: least load)
    LOAD_THRESHOLD = "load_threshold"  # verl*/SGLang router: least-load if skewed, else cache
    LEAST_INFLIGHT = "least_inflight"  # slime: every step to the least in-flight worker
    HEDDLE_DP = "heddle_dp"  # presorted DP at dispatch (+ migration when enabled)


@dataclass(frozen=True)
class SystemConfig:
    """One system under test. ``mp_degree``: homogeneous MP; ``None`` = annealed plan (§6).

    ``balance_*_threshold``: the SGLang router's load-balance trigger (``--balance-abs-threshold``
    64 and ``--balance-rel-threshold`` 1.5 by default); the absolute one is scaled down to 16
    for the simulator's per-worker loads of tens of requests.
    """

    name: str
    priority: PriorityPolicy = PriorityPolicy.ROUND_ROBIN
    placement: PlacementPolicy = PlacementPolicy.STATIC_AFFINITY
    mp_degree: int | None = 1
    migration: bool = False
    balance_abs_threshold: int = 16
    balance_rel_threshold: float = 1.5


@dataclass(frozen=True)
class Scenario:
    """The cluster and the engine knobs shared by all systems in a comparison.

    Per GPU (a worker of MP ``m`` gets ``m`` times as much): ``max_batch_per_gpu`` running
    requests (SGLang's running-batch cap; heddle §7.1 runs ~100 trajectories per worker, we keep
    the cap under the trajectories per worker so requests queue); ``max_trajectories_per_gpu``,
    the DP's group limit (KV capacity, see ``MPLatencyModel.alpha_curve``);
    ``cache_tokens_per_gpu`` of prefix cache — 400 K tokens ≈ 50 GB of an 80 GB H100 left after
    14B bf16 weights at Qwen3-14B's 160 KiB/token, rounded up. ``prediction_interval``: the
    predictor service's batching delay, 0.1 s, the low end of heddle Table 1's 0.10–0.28 s.
    """

    gpu_budget: int = 16
    max_batch_per_gpu: int = 48
    max_trajectories_per_gpu: int = 96
    cache_tokens_per_gpu: float = 400_000.0
    prediction_interval: float = 0.1
    group_model: GroupModel = "fluid"
    latency: MPLatencyModel = field(default_factory=MPLatencyModel)
    seed: int = 0


@dataclass
class TrajectoryOutcome:
    trajectory_id: str
    total_tokens: int
    steps: int
    finished_at: float = 0.0
    queueing_seconds: float = 0.0
    migration_wait_seconds: float = 0.0
    worker_ids: list[int] = field(default_factory=list)


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

    @property
    def throughput(self) -> float:
        """End-to-end rollout throughput, output tokens per second (heddle §7.1's metric)."""
        return self.total_tokens / self.makespan if self.makespan > 0 else 0.0

    def longest_trajectory(self) -> TrajectoryOutcome:
        return max(self.outcomes.values(), key=lambda o: (o.total_tokens, o.trajectory_id))

    def cache_hit_rate(self) -> float:
        total = self.prefill_tokens + self.cached_tokens
        return self.cached_tokens / total if total else 0.0


@dataclass
class _Trajectory:
    record: TrajectoryRecord
    index: int
    next_step: int = 0
    tokens_so_far: int = 0
    tool_seconds_so_far: float = 0.0
    context_tokens: int = 0
    predicted_total: float = 0.0
    worker: int = -1
    in_tool: bool = False
    waiting_for_migration: bool = False
    migration_started: float = 0.0
    done: bool = False


class RolloutSimulation:
    """Runs one rollout batch of ``records`` under ``system`` on ``scenario``."""

    def __init__(
        self,
        records: Sequence[TrajectoryRecord],
        system: SystemConfig,
        scenario: Scenario,
        predictor: LengthPredictor,
        history_lengths: Sequence[float] | None = None,
        prefill_tokens_per_trajectory: float | None = None,
    ) -> None:
        if not records:
            raise ValueError("a rollout needs at least one trajectory")
        self.records = list(records)
        self.system = system
        self.scenario = scenario
        self.predictor = predictor
        self.history_lengths = history_lengths
        # the prefill a trajectory causes (prompt + tool outputs), what the DP charges per
        # member: from history when given, else the prompts alone (known at dispatch)
        self.prefill_tokens_per_trajectory = (
            prefill_tokens_per_trajectory
            if prefill_tokens_per_trajectory is not None
            else float(np.mean([r.prompt_tokens for r in records]))
        )
        self.loop = EventLoop()
        self.model = scenario.latency
        self.trajectories = {
            r.trajectory_id: _Trajectory(r, i, context_tokens=r.prompt_tokens)
            for i, r in enumerate(self.records)
        }
        self.outcomes = {
            r.trajectory_id: TrajectoryOutcome(r.trajectory_id, r.total_tokens, len(r.steps))
            for r in self.records
        }
        self.group_finished: dict[str, list[int]] = {}
        self.active = len(self.records)
        self.active_over_time: list[tuple[float, int]] = [(0.0, self.active)]
        self.prediction_queue: list[str] = []
        self.prediction_event_pending = False
        self.transmissions = TransmissionScheduler()
        self.migrations = 0
        self.group_sizes: tuple[int, ...] = ()
        self.workers: list[LLMWorker] = []
        self.degrees: tuple[int, ...] = ()

    # ------------------------------------------------------------------ setup
    def _context(self, t: _Trajectory) -> TrajectoryContext:
        steps = t.record.steps
        done = t.next_step
        return TrajectoryContext(
            prompt_id=t.record.prompt_id,
            prompt_tokens=t.record.prompt_tokens,
            steps_done=done,
            tokens_so_far=t.tokens_so_far,
            tool_seconds_so_far=t.tool_seconds_so_far,
            first_step_tokens=steps[0].output_tokens if done > 0 else None,
            last_step_tokens=steps[done - 1].output_tokens if done > 0 else None,
            group_finished_lengths=tuple(self.group_finished.get(t.record.group_id, ())),
            trajectory_id=t.record.trajectory_id,
        )

    def _worker_costs(self, degrees: Sequence[int]) -> list[WorkerCost]:
        return [
            worker_cost(
                self.model,
                m,
                len(self.records),
                batch_limit=self.scenario.max_batch_per_gpu * m,
                group_limit=self.scenario.max_trajectories_per_gpu * m,
                group_model=self.scenario.group_model,
                prefill_tokens_per_trajectory=self.prefill_tokens_per_trajectory,
            )
            for m in degrees
        ]

    def _build_workers(self, initial_totals: np.ndarray) -> None:
        budget = self.scenario.gpu_budget
        if self.system.mp_degree is None:
            # §7.5: the resource plan is made periodically, from the length distribution of
            # earlier rollouts (the tail's shape is stable even when who is long is not)
            lengths = (
                np.asarray(self.history_lengths, dtype=float)
                if self.history_lengths is not None
                else initial_totals
            )
            plan = plan_parallelism(
                lengths,
                budget,
                self.model,
                batch_limit_per_gpu=self.scenario.max_batch_per_gpu,
                group_limit_per_gpu=self.scenario.max_trajectories_per_gpu,
                group_model=self.scenario.group_model,
                prefill_tokens_per_trajectory=self.prefill_tokens_per_trajectory,
                seed=self.scenario.seed,
            )
            degrees = plan.degrees
        else:
            degrees = tuple([self.system.mp_degree] * (budget // self.system.mp_degree))
        self.degrees = tuple(sorted(degrees, reverse=True))
        preemptive = self.system.priority.preemptive
        for worker_id, mp in enumerate(self.degrees):
            self.workers.append(
                LLMWorker(
                    self.loop,
                    worker_id,
                    per_token_seconds=partial(self.model.per_token_seconds, mp=mp),
                    prefill_seconds_per_token=self.model.prefill_seconds(1, mp),
                    max_batch=self.scenario.max_batch_per_gpu * mp,
                    cache_capacity_tokens=self.scenario.cache_tokens_per_gpu * mp,
                    preemptive=preemptive,
                    mp=mp,
                )
            )

    def _initial_placement(self, initial_totals: np.ndarray) -> None:
        ordered = list(self.trajectories.values())
        if self.system.placement is PlacementPolicy.HEDDLE_DP:
            placement = place_trajectories(initial_totals, self._worker_costs(self.degrees))
            self.group_sizes = placement.group_sizes
            for t in ordered:
                t.worker = int(placement.assignment[t.index])
        else:
            for t in ordered:
                t.worker = t.index % len(self.workers)

    # ------------------------------------------------------------------ routing
    def _route(self, t: _Trajectory) -> int:
        placement = self.system.placement
        if placement in (PlacementPolicy.STATIC_AFFINITY, PlacementPolicy.HEDDLE_DP):
            return t.worker
        loads = [w.load for w in self.workers]
        least = int(np.argmin(loads))
        if placement is PlacementPolicy.LEAST_INFLIGHT:
            return least
        key = t.record.trajectory_id
        cached = [w.cached_tokens(key) for w in self.workers]
        best_cache = int(np.argmax(cached)) if max(cached) > 0 else least
        if placement is PlacementPolicy.CACHE_AWARE:
            return best_cache
        # LOAD_THRESHOLD (SGLang router semantics: --balance-abs/rel-threshold)
        skewed = (max(loads) - min(loads) > self.system.balance_abs_threshold) and (
            max(loads) > self.system.balance_rel_threshold * min(loads)
        )
        return least if skewed else best_cache

    # ------------------------------------------------------------------ steps
    def _submit_step(self, t: _Trajectory) -> None:
        worker_id = self._route(t)
        t.worker = worker_id
        step = t.record.steps[t.next_step]
        outcome = self.outcomes[t.record.trajectory_id]
        outcome.worker_ids.append(worker_id)
        priority = request_priority(
            self.system.priority,
            predicted_total_tokens=t.predicted_total,
            trajectory_arrival=float(t.index),  # all arrive at t=0; index breaks the tie
            step_submitted_at=self.loop.now,
        )
        self.workers[worker_id].submit(
            GenerationRequest(
                request_id=f"{t.record.trajectory_id}#{t.next_step}",
                output_tokens=step.output_tokens,
                context_tokens=t.context_tokens,
                cache_key=t.record.trajectory_id,
                priority=priority,
                on_done=partial(self._on_step_done, t),
            )
        )

    def _on_step_done(self, t: _Trajectory, result: GenerationResult) -> None:
        outcome = self.outcomes[t.record.trajectory_id]
        outcome.queueing_seconds += result.queueing_seconds
        step = t.record.steps[t.next_step]
        t.tokens_so_far += step.output_tokens
        t.context_tokens += step.output_tokens + step.tool_output_tokens
        t.tool_seconds_so_far += step.tool_seconds
        t.next_step += 1
        if t.next_step >= len(t.record.steps):
            self._finish(t)
            return
        t.in_tool = True
        self._queue_prediction(t)
        self.loop.after(step.tool_seconds, lambda: self._on_tool_done(t))

    def _on_tool_done(self, t: _Trajectory) -> None:
        t.in_tool = False
        trajectory_id = t.record.trajectory_id
        if any(r.trajectory_id == trajectory_id for r in self.transmissions.running):
            t.waiting_for_migration = True
            t.migration_started = self.loop.now
            return
        self.transmissions.cancel(trajectory_id)  # too late to hide it behind this tool call
        self._submit_step(t)

    def _finish(self, t: _Trajectory) -> None:
        t.done = True
        outcome = self.outcomes[t.record.trajectory_id]
        outcome.finished_at = self.loop.now
        self.group_finished.setdefault(t.record.group_id, []).append(t.tokens_so_far)
        self.active -= 1
        self.active_over_time.append((self.loop.now, self.active))

    # ------------------------------------------------------------------ prediction
    def _queue_prediction(self, t: _Trajectory) -> None:
        self.prediction_queue.append(t.record.trajectory_id)
        if not self.prediction_event_pending:
            self.prediction_event_pending = True
            self.loop.after(self.scenario.prediction_interval, self._flush_predictions)

    def _flush_predictions(self) -> None:
        self.prediction_event_pending = False
        ids = [i for i in dict.fromkeys(self.prediction_queue) if not self.trajectories[i].done]
        self.prediction_queue.clear()
        if not ids:
            return
        batch = [self.trajectories[i] for i in ids]
        remaining = self.predictor.predict_many([self._context(t) for t in batch])
        for t, rest in zip(batch, remaining, strict=True):
            t.predicted_total = t.tokens_so_far + float(rest)
        if self.system.migration and self.system.placement is PlacementPolicy.HEDDLE_DP:
            self._plan_migrations(ids)

    # ------------------------------------------------------------------ migration
    def _plan_migrations(self, changed: list[str]) -> None:
        active = {i: t.predicted_total for i, t in self.trajectories.items() if not t.done}
        current = {i: self.trajectories[i].worker for i in active}
        requests = plan_migrations(
            active, current, self.group_sizes, list(range(len(self.workers))), changed
        )
        for request in requests:
            t = self.trajectories[str(request.trajectory_id)]
            if t.in_tool and all(
                r.trajectory_id != request.trajectory_id for r in self.transmissions.running
            ):
                self.transmissions.submit(request)
        self._start_transfers()

    def _start_transfers(self) -> None:
        for request in self.transmissions.next_batch():
            t = self.trajectories[str(request.trajectory_id)]
            tokens = self.workers[request.source].cached_tokens(t.record.trajectory_id)
            duration = self.model.migration_seconds(tokens)
            self.loop.after(duration, partial(self._on_transfer_done, request, tokens))

    def _on_transfer_done(self, request: MigrationRequest, tokens: int) -> None:
        self.transmissions.complete(request.trajectory_id)
        t = self.trajectories[str(request.trajectory_id)]
        key = t.record.trajectory_id
        if tokens > 0:
            self.workers[request.destination].insert_cache(key, tokens)
        self.workers[request.source].drop_cache(key)
        t.worker = request.destination
        self.migrations += 1
        if t.waiting_for_migration:
            t.waiting_for_migration = False
            self.outcomes[key].migration_wait_seconds += self.loop.now - t.migration_started
            self._submit_step(t)
        self._start_transfers()

    # ------------------------------------------------------------------ run
    def run(self) -> RolloutResult:
        ordered = list(self.trajectories.values())
        initial = self.predictor.predict_many([self._context(t) for t in ordered])
        for t, rest in zip(ordered, initial, strict=True):
            t.predicted_total = float(rest)
        self._build_workers(np.asarray(initial, dtype=float))
        self._initial_placement(np.asarray(initial, dtype=float))
        for t in ordered:
            self._submit_step(t)
        self.loop.run()
        unfinished = [t.record.trajectory_id for t in ordered if not t.done]
        if unfinished:
            raise RuntimeError(f"{len(unfinished)} trajectories never finished: {unfinished[:3]}")
        makespan = max(o.finished_at for o in self.outcomes.values())
        return RolloutResult(
            system=self.system.name,
            makespan=makespan,
            total_tokens=sum(o.total_tokens for o in self.outcomes.values()),
            mp_degrees=self.degrees,
            outcomes=self.outcomes,
            active_over_time=self.active_over_time,
            prefill_tokens=sum(w.stats.prefill_tokens for w in self.workers),
            cached_tokens=sum(w.stats.cached_tokens for w in self.workers),
            preemptions=sum(w.stats.preemptions for w in self.workers),
            migrations=self.migrations,
        )


def run_rollout(
    records: Sequence[TrajectoryRecord],
    system: SystemConfig,
    scenario: Scenario,
    predictor: LengthPredictor,
    history_lengths: Sequence[float] | None = None,
    prefill_tokens_per_trajectory: float | None = None,
) -> RolloutResult:
    """Run one rollout batch; ``history_lengths`` (earlier rollouts' trajectory lengths) feed the
    annealed MP plan when ``system.mp_degree`` is ``None``; ``prefill_tokens_per_trajectory``
    (from history) is the DP's per-member prefill charge."""
    return RolloutSimulation(
        records, system, scenario, predictor, history_lengths, prefill_tokens_per_trajectory
    ).run()
