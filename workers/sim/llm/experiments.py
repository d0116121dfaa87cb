"""Shared set-up for the Heddle benchmarks: a workload (a history epoch to learn from and an
evaluation epoch to roll out), the trained predictors, the Fig. 13 prediction metrics, and a
same-run comparison of systems."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workers.algorithms.heddle.latency_model import MP_DEGREES
from workers.algorithms.heddle.prediction import (
    LengthPredictor,
    ProgressivePredictor,
    PromptHistoryPredictor,
    TrajectoryContext,
    TrajectoryRecord,
    pearson_r,
    recall_at_top,
)
from workers.sim.llm.baselines import context_lower_bound_makespan, lower_bound_makespan
from workers.sim.llm.rollout import (
    RolloutResult,
    Scenario,
    SystemConfig,
    WorkloadHistory,
    run_rollout,
)
from workers.sim.llm.systems import TrajectoryOutcome
from workers.sim.llm.timeline import decompose
from workers.sim.llm.trajectories import GENERATOR_VERSION, generate_trajectories


@dataclass
class Workload:
    profile: str
    history: list[TrajectoryRecord]
    evaluation: list[TrajectoryRecord]
    prompt_history: PromptHistoryPredictor
    progressive: ProgressivePredictor

    @property
    def history_lengths(self) -> list[int]:
        return [r.total_tokens for r in self.history]

    @property
    def planner_history(self) -> WorkloadHistory:
        return WorkloadHistory.of(self.history)


def prepare_workload(
    profile: str, *, prompts: int, seed: int = 0, generator: int = GENERATOR_VERSION
) -> Workload:
    """Epoch 0 is the recorded history (trains the predictors, feeds the MP plan); epoch 1, the
    same prompts with fresh samples, is the rollout under test. ``generator`` picks the trace
    generator version (``workers.sim.llm.trajectories``)."""
    history = generate_trajectories(profile, prompts=prompts, seed=seed, epoch=0, version=generator)
    evaluation = generate_trajectories(
        profile, prompts=prompts, seed=seed, epoch=1, version=generator
    )
    prompt_history = PromptHistoryPredictor().fit(history)
    progressive = ProgressivePredictor(prompt_history, seed=seed).fit(history)
    return Workload(profile, history, evaluation, prompt_history, progressive)


def _context_after(
    record: TrajectoryRecord, steps: int, group: Sequence[TrajectoryRecord]
) -> TrajectoryContext:
    steps = min(steps, len(record.steps))
    done = record.steps[:steps]
    return TrajectoryContext(
        prompt_id=record.prompt_id,
        prompt_tokens=record.prompt_tokens,
        steps_done=steps,
        tokens_so_far=sum(s.output_tokens for s in done),
        tool_seconds_so_far=sum(s.tool_seconds for s in done),
        first_step_tokens=record.steps[0].output_tokens if steps > 0 else None,
        last_step_tokens=record.steps[steps - 1].output_tokens if steps > 0 else None,
        group_finished_lengths=tuple(
            m.total_tokens
            for m in group
            if m.trajectory_id != record.trajectory_id and len(m.steps) <= steps
        ),
        trajectory_id=record.trajectory_id,
    )


def prediction_quality(
    workload: Workload, steps: Sequence[int] = (1, 2), top_fraction: float = 0.1
) -> dict[str, dict[str, float]]:
    """heddle Fig. 13: recall of the longest ``top_fraction`` and Pearson r of predicted vs
    actual total length, prompt-only history baseline vs the progressive predictor after
    ``k`` steps ("heddle-k"). Trajectories that finished within ``k`` steps are known exactly at
    that point and are scored as such ("all"); "running" scores only those still running, the
    harder and stricter comparison."""
    records = workload.evaluation
    groups: dict[str, list[TrajectoryRecord]] = {}
    for record in records:
        groups.setdefault(record.group_id, []).append(record)
    actual = np.asarray([r.total_tokens for r in records], dtype=float)
    baseline = np.asarray(
        [workload.prompt_history.predicted_total(r.prompt_id) for r in records], dtype=float
    )
    report: dict[str, dict[str, float]] = {
        "prompt_only": {
            "recall_top": recall_at_top(baseline, actual, top_fraction),
            "pearson_r": pearson_r(baseline, actual),
        }
    }
    for k in steps:
        running = np.asarray([len(r.steps) > k for r in records])
        contexts = [_context_after(r, k, groups[r.group_id]) for r in records]
        remaining = workload.progressive.predict_many(contexts)
        so_far = np.asarray([c.tokens_so_far for c in contexts], dtype=float)
        predicted = np.where(running, so_far + remaining, actual)
        report[f"heddle_{k}"] = {
            "recall_top": recall_at_top(predicted, actual, top_fraction),
            "pearson_r": pearson_r(predicted, actual),
            "running_recall_top": recall_at_top(predicted[running], actual[running], top_fraction),
            "running_pearson_r": pearson_r(predicted[running], actual[running]),
            "running_prompt_only_recall_top": recall_at_top(
                baseline[running], actual[running], top_fraction
            ),
            "running_prompt_only_pearson_r": pearson_r(baseline[running], actual[running]),
            "running_share": float(running.mean()),
        }
    return report


def compare_systems(
    workload: Workload,
    systems: Sequence[SystemConfig],
    scenario: Scenario,
    predictor: LengthPredictor | None = None,
) -> dict[str, RolloutResult]:
    """Every system on the same evaluation epoch, scenario and predictor (same-run ratios)."""
    history = workload.planner_history
    return {
        system.name: run_rollout(
            workload.evaluation, system, scenario, predictor or workload.progressive, history
        )
        for system in systems
    }


def best_mp(
    workload: Workload,
    factory: Callable[[int], SystemConfig],
    scenario: Scenario,
    degrees: Sequence[int] = MP_DEGREES,
) -> tuple[int, dict[int, RolloutResult]]:
    """Run a homogeneous-MP system at every degree the budget allows; the degree with the
    highest throughput and every run (heddle §7.1: baselines at their maximum-throughput MP)."""
    sweep = {
        m: compare_systems(workload, [factory(m)], scenario)[factory(m).name]
        for m in degrees
        if m <= scenario.gpu_budget
    }
    best = max(sweep, key=lambda m: (sweep[m].throughput, -m))
    return best, sweep


def _decomposition(outcome: TrajectoryOutcome) -> dict[str, Any]:
    return {
        "trajectory_id": outcome.trajectory_id,
        "finish_s": outcome.finished_at,
        **decompose(outcome.timeline),
    }


def time_breakdown(result: RolloutResult) -> dict[str, Any]:
    """Where the time went (heddle formula 1, ``workers.sim.llm.timeline``): the critical
    trajectory (the last to finish, which sets the makespan) and the longest one split into
    queueing, alone-on-its-worker, interference, tool and migration wait; the same parts summed
    over every trajectory; each worker's last finish (load imbalance); the planner's estimate,
    and per worker the DP's time for its group beside its prefilled and decoded tokens (where
    the DP's group model errs: a worker finishing far past its planned time)."""
    outcomes = list(result.outcomes.values())
    critical = max(outcomes, key=lambda o: (o.finished_at, o.trajectory_id))
    totals = [decompose(o.timeline) for o in outcomes]
    keys = ("queueing_s", "alone_s", "interference_s", "tool_s", "migration_wait_s")
    summed = {key: float(sum(t[key] for t in totals)) for key in keys}
    last_finish: dict[int, float] = {}
    for outcome in outcomes:
        for step in outcome.timeline:
            last_finish[step.worker] = max(last_finish.get(step.worker, 0.0), step.finished_at)
    finishes = [last_finish.get(w, 0.0) for w in range(len(result.mp_degrees))]
    return {
        "critical_trajectory": _decomposition(critical),
        "longest_trajectory": _decomposition(result.longest_trajectory()),
        "all_trajectories": {
            **summed,
            "alpha": (summed["alone_s"] + summed["interference_s"]) / max(summed["alone_s"], 1e-12),
        },
        "worker_last_finish_s": finishes,
        "worker_finish_spread_s": max(finishes) - min(finishes),
        "planner_makespan_s": result.planner_makespan,
        "planner_group_cost_s": list(result.planner_group_costs),
        "worker_prefill_tokens": list(result.worker_prefill_tokens),
        "worker_output_tokens": list(result.worker_output_tokens),
    }


def summarise(result: RolloutResult) -> dict[str, Any]:
    longest = result.longest_trajectory()
    return {
        "throughput_tokens_per_s": result.throughput,
        "makespan_s": result.makespan,
        "mp_degrees": list(result.mp_degrees),
        "longest_trajectory_tokens": longest.total_tokens,
        "longest_trajectory_queueing_s": longest.queueing_seconds,
        "longest_trajectory_finish_s": longest.finished_at,
        "max_queueing_s": max(o.queueing_seconds for o in result.outcomes.values()),
        "cache_hit_rate": result.cache_hit_rate(),
        "prefill_tokens": result.prefill_tokens,
        "preemptions": result.preemptions,
        "kv_preemptions": result.kv_preemptions,
        "migrations": result.migrations,
        "migrations_refused": result.migrations_refused,
        "router_decisions": result.router_decisions,
        "breakdown": time_breakdown(result),
    }


def lower_bound(workload: Workload, scenario: Scenario) -> dict[str, float]:
    if scenario.engine == "legacy":
        makespan = lower_bound_makespan(workload.evaluation, scenario.latency)
    else:
        makespan = context_lower_bound_makespan(workload.evaluation, scenario.context)
    tokens = sum(r.total_tokens for r in workload.evaluation)
    return {"throughput_tokens_per_s": tokens / makespan, "makespan_s": makespan}


def why_slower_or_faster(
    ours: str, row: dict[str, Any], other: str, other_row: dict[str, Any]
) -> str:
    """One sentence, built from the two summaries, saying where the makespans differ: each
    critical trajectory's formula-1 parts, the work summed over all trajectories, cache hits."""

    def parts(name: str, summary: dict[str, Any]) -> str:
        critical = summary["breakdown"]["critical_trajectory"]
        every = summary["breakdown"]["all_trajectories"]
        return (
            f"{name}: makespan {summary['makespan_s']:.0f} s set by a "
            f"{critical['output_tokens']}-token trajectory = queueing {critical['queueing_s']:.0f}"
            f" + alone at MP {critical['mp_degrees']} {critical['alone_s']:.0f} + interference "
            f"{critical['interference_s']:.0f} + tool {critical['tool_s']:.0f} + migration wait "
            f"{critical['migration_wait_s']:.0f} s; over all trajectories queueing "
            f"{every['queueing_s']:.0f} s, interference {every['interference_s']:.0f} s "
            f"(alpha {every['alpha']:.2f}), cache hits {summary['cache_hit_rate']:.2f}, "
            f"preemptions {summary['preemptions']}, migrations {summary['migrations']}"
        )

    return f"{parts(ours, row)}. {parts(other, other_row)}."


def engine_mp_profile(scenario: Scenario, mean_context: float) -> dict[str, dict[str, float]]:
    """The context engine per MP degree at the workload's mean context (heddle §6's trade-off,
    Fig. 7): per-token time alone, and decode tokens/s per GPU with the batch the worker can
    hold (its batch cap, or what its KV pool holds at that context)."""
    model = scenario.context
    profile = {}
    for m in MP_DEGREES:
        if m > scenario.gpu_budget:
            continue
        batch = min(scenario.max_batch(m), int(model.kv_capacity_tokens(m) / mean_context))
        full = model.step_seconds(m, batch, batch * mean_context)
        profile[str(m)] = {
            "alone_ms_per_token": 1e3 * model.step_seconds(m, 1, mean_context),
            "full_batch": float(batch),
            "full_batch_tokens_per_s_per_gpu": batch / full / m,
        }
    return profile
