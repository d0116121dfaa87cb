"""Heddle trajectory-level scheduling (heddle §4, §7.2, Figs. 13–14).

Prediction (Fig. 13): recall of the longest 10 % and Pearson r, prompt-only history baseline vs
the progressive predictor after steps 1 and 2, on a held-out epoch of each profile.

Scheduling (Fig. 14): rollout time and the longest trajectory's total queueing (summed over its
steps) under PPS vs FCFS, step round-robin and shortest-first. Placement (static, round-robin
assignment) and MP (1) are the same for all four, so only the priority policy differs; workers
hold more trajectories than their batch cap so that requests queue.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.report import BenchReport, Target, plot_path
from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.experiments import (
    compare_systems,
    prediction_quality,
    prepare_workload,
    summarise,
)
from workers.sim.llm.rollout import PlacementPolicy, Scenario, SystemConfig

NAME = "heddle_scheduling"
# Queueing below one decode step (τ at batch 1) is below the model's resolution; a PPS queueing
# of zero is counted as one step so the ratio stays finite.
QUEUE_FLOOR_S = MPLatencyModel().tau(1)


def policies() -> list[SystemConfig]:
    return [
        SystemConfig(p.value, p, PlacementPolicy.STATIC_AFFINITY, mp_degree=1)
        for p in (
            PriorityPolicy.PPS,
            PriorityPolicy.FCFS,
            PriorityPolicy.ROUND_ROBIN,
            PriorityPolicy.SHORTEST_FIRST,
        )
    ]


def run_core(prompts: int, gpus: int, max_batch_per_gpu: int, profiles: list[str]) -> dict:
    scenario = Scenario(
        gpu_budget=gpus, max_batch_per_gpu=max_batch_per_gpu, max_trajectories_per_gpu=10_000
    )
    prediction = {}
    scheduling = {}
    for profile in profiles:
        workload = prepare_workload(profile, prompts=prompts)
        prediction[profile] = prediction_quality(workload)
        if profile == profiles[0]:
            results = compare_systems(workload, policies(), scenario)
            scheduling = {name: summarise(result) for name, result in results.items()}
    return {"prediction": prediction, "scheduling": scheduling, "profile": profiles[0]}


def run(quick: bool = False) -> BenchReport:
    params = (
        {"prompts": 16, "gpus": 4, "max_batch_per_gpu": 24, "profiles": ["coding"]}
        if quick
        else {
            "prompts": 48,
            "gpus": 8,
            "max_batch_per_gpu": 32,
            "profiles": ["coding", "search", "math"],
        }
    )
    series = run_core(**params)  # type: ignore[arg-type]
    report = BenchReport(
        NAME,
        quick,
        params={**params, "group_size": 16, "queue_floor_s": QUEUE_FLOOR_S},
        series=series,
    )
    sched = series["scheduling"]
    rr_queue = sched["round_robin"]["longest_trajectory_queueing_s"]
    pps_queue = sched["pps"]["longest_trajectory_queueing_s"]
    report.targets.append(
        Target.at_least(
            "rr_over_pps_longest_trajectory_queueing",
            max(rr_queue, QUEUE_FLOOR_S) / max(pps_queue, QUEUE_FLOOR_S),
            2.0,
        )
    )
    for profile, quality in series["prediction"].items():
        step2, base = quality["heddle_2"], quality["prompt_only"]
        report.targets.append(
            Target.is_true(
                f"{profile}_progressive_beats_prompt_only_at_step2",
                step2["recall_top"] > base["recall_top"] and step2["pearson_r"] > base["pearson_r"],
            )
        )
    _plot(series)
    return report


def _plot(series: dict) -> None:
    sched = series["scheduling"]
    names = list(sched)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].bar(names, [sched[n]["makespan_s"] for n in names], color="tab:blue")
    axes[0].set_title(f"rollout time (s), {series['profile']}")
    axes[1].bar(names, [sched[n]["longest_trajectory_queueing_s"] for n in names], color="tab:red")
    axes[1].set_title("longest trajectory: total queueing (s)")
    quality = series["prediction"][series["profile"]]
    labels = ["prompt_only", "heddle_1", "heddle_2"]
    x = range(len(labels))
    axes[2].bar(
        [i - 0.2 for i in x], [quality[k]["recall_top"] for k in labels], 0.4, label="recall@top10%"
    )
    axes[2].bar(
        [i + 0.2 for i in x], [quality[k]["pearson_r"] for k in labels], 0.4, label="Pearson r"
    )
    axes[2].set_xticks(list(x), labels)
    axes[2].set_title("length prediction")
    axes[2].legend(fontsize=8)
    for ax in axes[:2]:
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)
