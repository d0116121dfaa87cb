"""Heddle trajectory-level scheduling (heddle §4, §7.2, Figs. 13–14).

Prediction (Fig. 13): recall of the longest 10 % and Pearson r, prompt-only history baseline vs
the progressive predictor after steps 1 and 2, on a held-out epoch of each profile. The targets
compare the two on the trajectories still running after step 2 (those finished are known
exactly, which no predictor earns); the traces come from generator v2, whose first step does not
carry the sample's latent. Generator v1 (first step ≈ the latent) is reported beside it.

Scheduling (Fig. 14): rollout time under PPS vs FCFS, step round-robin and shortest-first, and
the longest trajectory's total queueing (summed over its steps, in seconds). Placement (static,
round-robin assignment) and MP (1) are the same for all four; workers hold more trajectories than
their batch cap so that requests queue. The target: PPS's rollout throughput over the best of the
other three, context-aware engine (the legacy engine reported beside it). ``pps_remaining`` (not
a target): PPS keyed by the predicted remaining length (``PriorityPolicy.PPS_REMAINING``, the
other reading of heddle §4.2), with its own ratio over the same three.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.report import BenchReport, Target, plot_path
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.experiments import (
    compare_systems,
    prediction_quality,
    prepare_workload,
    summarise,
)
from workers.sim.llm.rollout import PlacementPolicy, Scenario, SystemConfig
from workers.sim.llm.systems import ENGINES
from workers.sim.llm.trajectories import GENERATOR_VERSION

NAME = "heddle_scheduling"
OTHERS = ("fcfs", "round_robin", "shortest_first")


def policies() -> list[SystemConfig]:
    return [
        SystemConfig(p.value, p, PlacementPolicy.STATIC_AFFINITY, mp_degree=1)
        for p in (
            PriorityPolicy.PPS,
            PriorityPolicy.PPS_REMAINING,
            PriorityPolicy.FCFS,
            PriorityPolicy.ROUND_ROBIN,
            PriorityPolicy.SHORTEST_FIRST,
        )
    ]


def run_core(
    prompts: int, gpus: int, max_batch_per_gpu: int, profiles: list[str], engines: list[str]
) -> dict:
    prediction: dict = {f"generator_v{v}": {} for v in (GENERATOR_VERSION, 1)}
    scheduling: dict = {}
    for profile in profiles:
        for version in (GENERATOR_VERSION, 1):
            workload = prepare_workload(profile, prompts=prompts, generator=version)
            prediction[f"generator_v{version}"][profile] = prediction_quality(workload)
    workload = prepare_workload(profiles[0], prompts=prompts)
    for engine in engines:
        scenario = Scenario(
            gpu_budget=gpus,
            max_batch_per_gpu=max_batch_per_gpu,
            max_trajectories_per_gpu=10_000,
            engine=engine,  # type: ignore[arg-type]
        )
        results = compare_systems(workload, policies(), scenario)
        rows: dict[str, Any] = {name: summarise(r) for name, r in results.items()}
        best_other = max(rows[n]["throughput_tokens_per_s"] for n in OTHERS)
        rows["pps_over_best_other"] = rows["pps"]["throughput_tokens_per_s"] / best_other
        rows["pps_remaining_over_best_other"] = (
            rows["pps_remaining"]["throughput_tokens_per_s"] / best_other
        )
        scheduling[engine] = rows
    return {"prediction": prediction, "scheduling": scheduling, "profile": profiles[0]}


def run(quick: bool = False) -> BenchReport:
    params = (
        {
            "prompts": 16,
            "gpus": 4,
            "max_batch_per_gpu": 24,
            "profiles": ["coding"],
            "engines": list(ENGINES),
        }
        if quick
        else {
            "prompts": 48,
            "gpus": 8,
            "max_batch_per_gpu": 32,
            "profiles": ["coding", "search", "math"],
            "engines": list(ENGINES),
        }
    )
    series = run_core(**params)  # type: ignore[arg-type]
    report = BenchReport(
        NAME,
        quick,
        params={**params, "group_size": 16, "trace_generator": GENERATOR_VERSION},
        series=series,
    )
    report.targets.append(
        Target.at_least(
            "pps_over_best_other_policy_throughput",
            series["scheduling"]["context"]["pps_over_best_other"],
            1.0,
        )
    )
    for profile, quality in series["prediction"][f"generator_v{GENERATOR_VERSION}"].items():
        step2 = quality["heddle_2"]
        for metric in ("pearson_r", "recall_top"):
            report.targets.append(
                Target.at_least(
                    f"{profile}_progressive_minus_prompt_only_{metric}_running_step2",
                    step2[f"running_{metric}"] - step2[f"running_prompt_only_{metric}"],
                    0.0,
                )
            )
    _plot(series)
    return report


def _plot(series: dict) -> None:
    sched = series["scheduling"]["context"]
    names = ["pps", "pps_remaining", *OTHERS]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    axes[0].bar(names, [sched[n]["makespan_s"] for n in names], color="tab:blue")
    axes[0].set_title(f"rollout time (s), {series['profile']}, context engine")
    axes[1].bar(names, [sched[n]["longest_trajectory_queueing_s"] for n in names], color="tab:red")
    axes[1].set_title("longest trajectory: total queueing (s)")
    quality = series["prediction"][f"generator_v{GENERATOR_VERSION}"][series["profile"]]
    labels = ["prompt_only", "heddle_1", "heddle_2"]
    x = range(len(labels))
    axes[2].bar(
        [i - 0.2 for i in x], [quality[k]["recall_top"] for k in labels], 0.4, label="recall@top10%"
    )
    axes[2].bar(
        [i + 0.2 for i in x], [quality[k]["pearson_r"] for k in labels], 0.4, label="Pearson r"
    )
    axes[2].set_xticks(list(x), labels)
    axes[2].set_title("length prediction (generator v2)")
    axes[2].legend(fontsize=8)
    for ax in axes[:2]:
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)
