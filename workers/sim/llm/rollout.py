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

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial

import numpy as np

from workers.algorithms.heddle.latency_model import MP_DEGREES, MPLatencyModel
from workers.algorithms.heddle.migration import (
    MigrationRequest,
    TransmissionScheduler,
    plan_migrations,
)
from workers.algorithms.heddle.parallelism import ContextGrowth, plan_parallelism, worker_cost
from workers.algorithms.heddle.placement import WorkerCost, place_trajectories
from workers.algorithms.heddle.prediction import (
    LengthPredictor,
    TrajectoryContext,
    TrajectoryRecord,
)
from workers.algorithms.heddle.priority import request_priority
from workers.sim.events import EventLoop
from workers.sim.llm.cost import ContextCost, EngineCost, LegacyCost
from workers.sim.llm.profiler import profile_planner_model
from workers.sim.llm.routing import CacheAwareConfig, CacheAwareRouter
from workers.sim.llm.systems import (
    PlacementPolicy,
    RolloutResult,
    Scenario,
    SystemConfig,
    TrajectoryOutcome,
)
from workers.sim.llm.timeline import StepTrace, step_alone_seconds
from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker

__all__ = [
    "PlacementPolicy",
    "RolloutResult",
    "RolloutSimulation",
    "Scenario",
    "SystemConfig",
    "TrajectoryOutcome",
    "WorkloadHistory",
    "run_rollout",
]


@dataclass(frozen=True)
class WorkloadHistory:
    """What the previous epoch tells the planners: trajectory lengths (the MP plan, §7.5), the
    prefill a trajectory causes (prompt + tool outputs, the DP's per-member charge) and the mean
    context a decoding request holds (the profiler's operating point)."""

    lengths: tuple[float, ...]
    prefill_tokens_per_trajectory: float
    mean_context_tokens: float
    mean_prefill_tokens: float
    mean_prompt_tokens: float = 0.0
    context_growth: float = 1.0

    @classmethod
    def of(cls, records: Sequence[TrajectoryRecord]) -> WorkloadHistory:
        contexts, prefills, per_trajectory = [], [], []
        for record in records:
            context = float(record.prompt_tokens)
            prefills.append(context)
            for step in record.steps:
                contexts.append(context + step.output_tokens / 2.0)
                context += step.output_tokens + step.tool_output_tokens
                prefills.append(step.tool_output_tokens)
            per_trajectory.append(
                record.prompt_tokens + sum(s.tool_output_tokens for s in record.steps)
            )
        output = sum(r.total_tokens for r in records)
        tool_output = sum(s.tool_output_tokens for r in records for s in r.steps)
        return cls(
            lengths=tuple(float(r.total_tokens) for r in records),
            prefill_tokens_per_trajectory=float(np.mean(per_trajectory)),
            mean_context_tokens=float(np.mean(contexts)),
            mean_prefill_tokens=float(np.mean(prefills)),
            mean_prompt_tokens=float(np.mean([r.prompt_tokens for r in records])),
            context_growth=1.0 + tool_output / max(output, 1),
        )

    def context_growth_model(self) -> ContextGrowth:
        """A trajectory's context as it decodes: its prompt, plus each token and its share of
        the tool outputs (placement's context charge)."""
        return ContextGrowth(self.mean_prompt_tokens, self.context_growth)


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
    """Runs one rollout batch of ``records`` under ``system`` on ``scenario``; ``history`` (the
    previous epoch) feeds the planners, without it they see the prompts only."""

    def __init__(
        self,
        records: Sequence[TrajectoryRecord],
        system: SystemConfig,
        scenario: Scenario,
        predictor: LengthPredictor,
        history: WorkloadHistory | None = None,
    ) -> None:
        if not records:
            raise ValueError("a rollout needs at least one trajectory")
        self.records = list(records)
        self.system = system
        self.scenario = scenario
        self.predictor = predictor
        prompts = float(np.mean([r.prompt_tokens for r in records]))
        self.history = history or WorkloadHistory((), prompts, prompts, prompts, prompts)
        self.loop = EventLoop()
        self.model = self._planner_model()
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
        self.migrations_refused = 0
        self.group_sizes: tuple[int, ...] = ()
        self.workers: list[LLMWorker] = []
        self.degrees: tuple[int, ...] = ()
        self.router: CacheAwareRouter | None = None
        self.planner_makespan: float | None = None
        self.planner_group_costs: tuple[float, ...] = ()

    # ------------------------------------------------------------------ setup
    def _planner_model(self) -> MPLatencyModel:
        """What Heddle's DP and annealer believe: the legacy model itself, or the profile of the
        context-aware engine at the previous epoch's mean context (heddle §5.2)."""
        if self.scenario.engine == "legacy":
            return self.scenario.latency
        return profile_planner_model(
            self.scenario.context,
            mean_context=self.history.mean_context_tokens,
            mean_prefill_tokens=self.history.mean_prefill_tokens,
            max_batch=self.scenario.max_batch(1),
            per_degree=self.system.per_degree_profile,
            context_aware=self._context_aware,
        )

    @property
    def _context_aware(self) -> bool:
        return (
            self.system.context_aware_planner
            and self.scenario.engine == "context"
            and self.scenario.group_model == "fluid"
        )

    @property
    def _context_growth(self) -> ContextGrowth | None:
        return self.history.context_growth_model() if self._context_aware else None

    def _engine_cost(self, mp: int) -> EngineCost:
        if self.scenario.engine == "legacy":
            return LegacyCost(
                partial(self.model.per_token_seconds, mp=mp), self.model.prefill_seconds(1, mp)
            )
        return ContextCost(self.scenario.context, mp)

    def _batch_limit(self, mp: int) -> int:
        """The running-batch cap the DP plans with: the engine's cap, and in the context model
        the batch the KV pool holds at the mean context."""
        cap = self.scenario.max_batch(mp)
        if self.scenario.engine == "legacy":
            return cap
        held = self.scenario.context.kv_capacity_tokens(mp) / self.history.mean_context_tokens
        return max(1, min(cap, int(held)))

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
                batch_limit=self._batch_limit(m),
                group_limit=self.scenario.max_trajectories_per_gpu * m,
                group_model=self.scenario.group_model,
                prefill_tokens_per_trajectory=self.history.prefill_tokens_per_trajectory,
                context=self._context_growth,
            )
            for m in degrees
        ]

    def _build_workers(self, initial_totals: np.ndarray) -> None:
        budget = self.scenario.gpu_budget
        if self.system.mp_degree is None:
            # §7.5: the resource plan is made periodically, from the length distribution of
            # earlier rollouts (the tail's shape is stable even when who is long is not)
            lengths = np.asarray(self.history.lengths or initial_totals, dtype=float)
            plan = plan_parallelism(
                lengths,
                budget,
                self.model,
                batch_limit_per_gpu=self._batch_limit(1),
                group_limit_per_gpu=self.scenario.max_trajectories_per_gpu,
                group_model=self.scenario.group_model,
                prefill_tokens_per_trajectory=self.history.prefill_tokens_per_trajectory,
                context=self._context_growth,
                batch_limits=(
                    {m: self._batch_limit(m) for m in MP_DEGREES if m <= budget}
                    if self._context_aware or self.scenario.max_batch_per_worker is not None
                    else None
                ),
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
                    cost=self._engine_cost(mp),
                    max_batch=self.scenario.max_batch(mp),
                    cache_capacity_tokens=self.scenario.cache_tokens_per_gpu * mp,
                    preemptive=preemptive,
                    mp=mp,
                )
            )

    def _initial_placement(self, initial_totals: np.ndarray) -> None:
        ordered = list(self.trajectories.values())
        placement = self.system.placement
        if placement is PlacementPolicy.HEDDLE_DP:
            plan = place_trajectories(initial_totals, self._worker_costs(self.degrees))
            self.group_sizes = plan.group_sizes
            self.planner_makespan = plan.makespan
            self.planner_group_costs = tuple(float(c) for c in plan.group_costs)
            for t in ordered:
                t.worker = int(plan.assignment[t.index])
            return
        for t in ordered:
            t.worker = t.index % len(self.workers)
        if placement is PlacementPolicy.SGLANG_ROUTER:
            self.router = CacheAwareRouter(len(self.workers), self.system.router)
        elif placement is PlacementPolicy.CACHE_AWARE:
            config = CacheAwareConfig(
                cache_threshold=self.system.router.cache_threshold,
                balance_abs_threshold=float("inf"),
            )
            self.router = CacheAwareRouter(len(self.workers), config)

    # ------------------------------------------------------------------ routing
    def _route(self, t: _Trajectory) -> int:
        placement = self.system.placement
        if placement in (PlacementPolicy.STATIC_AFFINITY, PlacementPolicy.HEDDLE_DP):
            return t.worker
        loads = [w.load for w in self.workers]
        if self.router is None:  # LEAST_INFLIGHT
            return int(np.argmin(loads))
        return self.router.route(
            trajectory=t.record.trajectory_id,
            prompt=t.record.prompt_id,
            prompt_tokens=t.record.prompt_tokens,
            request_tokens=t.context_tokens,
            loads=loads,
        )

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
            tokens_so_far=t.tokens_so_far,
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
        last = t.next_step + 1 >= len(t.record.steps)
        outcome.timeline.append(self._trace(t, result, 0.0 if last else step.tool_seconds))
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

    def _trace(self, t: _Trajectory, result: GenerationResult, tool_seconds: float) -> StepTrace:
        mp = self.workers[result.worker_id].mp
        engine = self.scenario.context if self.scenario.engine == "context" else self.model
        output = t.record.steps[t.next_step].output_tokens
        return StepTrace(
            worker=result.worker_id,
            mp=mp,
            submitted_at=result.submitted_at,
            finished_at=result.finished_at,
            queueing_seconds=result.queueing_seconds,
            output_tokens=output,
            context_tokens=t.context_tokens,
            prefill_tokens=result.prefill_tokens,
            cached_tokens=result.cached_tokens,
            preemptions=result.preemptions,
            alone_seconds=step_alone_seconds(
                engine,
                mp,
                output_tokens=output,
                context_tokens=t.context_tokens,
                prefill_tokens=result.prefill_tokens,
            ),
            tool_seconds=tool_seconds,
        )

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
            if not (t.in_tool or t.waiting_for_migration):
                self._reprioritize(t)
        if self.system.migration and self.system.placement is PlacementPolicy.HEDDLE_DP:
            self._plan_migrations(ids)

    def _reprioritize(self, t: _Trajectory) -> None:
        """A prediction that lands after the tool call ended (a tool call shorter than the
        predictor's latency) re-keys the step already submitted, pending or running: PPS
        reorders the workers' queues as predictions improve (heddle §4.2), it does not wait for
        the trajectory's next step."""
        policy = self.system.priority
        if not (self.system.reprioritize_submitted and policy.uses_prediction):
            return
        priority = request_priority(
            policy,
            predicted_total_tokens=t.predicted_total,
            trajectory_arrival=float(t.index),
            step_submitted_at=self.loop.now,  # unused by the prediction-driven policies
            tokens_so_far=t.tokens_so_far,
        )
        self.workers[t.worker].reprioritize(f"{t.record.trajectory_id}#{t.next_step}", priority)

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
        if tokens > 0 and not self.workers[request.destination].insert_cache(key, tokens):
            self.migrations_refused += 1  # the target's KV pool is full: stay where it is
        else:
            self.workers[request.source].drop_cache(key)
            t.worker = request.destination
            self.migrations += 1
        if t.waiting_for_migration:
            t.waiting_for_migration = False
            waited = self.loop.now - t.migration_started
            outcome = self.outcomes[key]
            outcome.migration_wait_seconds += waited
            outcome.timeline[-1] = replace(outcome.timeline[-1], migration_wait_seconds=waited)
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
            kv_preemptions=sum(w.stats.kv_preemptions for w in self.workers),
            migrations_refused=self.migrations_refused,
            router_decisions=dict(self.router.decisions) if self.router else {},
            planner_makespan=self.planner_makespan,
            planner_group_costs=self.planner_group_costs,
            worker_prefill_tokens=tuple(w.stats.prefill_tokens for w in self.workers),
            worker_output_tokens=tuple(round(w.stats.tokens_generated) for w in self.workers),
        )


def run_rollout(
    records: Sequence[TrajectoryRecord],
    system: SystemConfig,
    scenario: Scenario,
    predictor: LengthPredictor,
    history: WorkloadHistory | None = None,
) -> RolloutResult:
    """Run one rollout batch; ``history`` (the previous epoch) feeds the annealed MP plan when
    ``system.mp_degree`` is ``None``, the DP's per-member prefill charge and the profiler."""
    return RolloutSimulation(records, system, scenario, predictor, history).run()
