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
    }


def lower_bound(workload: Workload, scenario: Scenario) -> dict[str, float]:
    if scenario.engine == "legacy":
        makespan = lower_bound_makespan(workload.evaluation, scenario.latency)
    else:
        makespan = context_lower_bound_makespan(workload.evaluation, scenario.context)
    tokens = sum(r.total_tokens for r in workload.evaluation)
    return {"throughput_tokens_per_s": tokens / makespan, "makespan_s": makespan}
