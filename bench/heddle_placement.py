"""Heddle trajectory-aware placement (heddle §5, §7.3, Fig. 15).

Rollout throughput of presorted DP + migration vs least-load (SGLang-router style: least load
when the skew passes the thresholds, else cache) vs cache-aware (every step to the worker holding
its prefix). Scheduling (PPS) and MP (1) are the same for all three. The batch cap is high
(128 per GPU) so that co-locating long trajectories with many short ones costs interference
(α(b) of the three-piece PTL curve), as in Fig. 6.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.report import BenchReport, Target, plot_path
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.experiments import compare_systems, prepare_workload, summarise
from workers.sim.llm.rollout import Placement, Scenario, SystemConfig

NAME = "heddle_placement"


def systems() -> list[SystemConfig]:
    pps = PriorityPolicy.PPS
    return [
        SystemConfig("heddle_dp_migration", pps, Placement.HEDDLE_DP, mp_degree=1, migration=True),
        SystemConfig("least_load", pps, Placement.LOAD_THRESHOLD, mp_degree=1),
        SystemConfig("cache_aware", pps, Placement.CACHE_AWARE, mp_degree=1),
    ]


def run_core(prompts: int, gpus: int, profiles: list[str]) -> dict:
    scenario = Scenario(gpu_budget=gpus, max_batch_per_gpu=128, max_trajectories_per_gpu=256)
    out = {}
    for profile in profiles:
        workload = prepare_workload(profile, prompts=prompts)
        results = compare_systems(workload, systems(), scenario)
        out[profile] = {name: summarise(result) for name, result in results.items()}
    return out


def run(quick: bool = False) -> BenchReport:
    params = (
        {"prompts": 24, "gpus": 4, "profiles": ["coding"]}
        if quick
        else {"prompts": 64, "gpus": 8, "profiles": ["coding", "search", "math"]}
    )
    series = run_core(**params)
    report = BenchReport(NAME, quick, params={**params, "max_batch_per_gpu": 128}, series=series)
    for profile, results in series.items():
        ours = results["heddle_dp_migration"]["throughput_tokens_per_s"]
        best_other = max(
            r["throughput_tokens_per_s"] for n, r in results.items() if n != "heddle_dp_migration"
        )
        report.targets.append(
            Target.at_least(f"{profile}_dp_over_best_placement_baseline", ours / best_other, 1.0)
        )
    _plot(series)
    return report


def _plot(series: dict) -> None:
    profiles = list(series)
    names = list(next(iter(series.values())))
    fig, ax = plt.subplots(figsize=(3 + 2.5 * len(profiles), 3.8))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        ax.bar(
            [p + i * width for p in range(len(profiles))],
            [series[p][name]["throughput_tokens_per_s"] for p in profiles],
            width,
            label=name,
        )
    ax.set_xticks([p + width * (len(names) - 1) / 2 for p in range(len(profiles))], profiles)
    ax.set_ylabel("rollout throughput (tokens/s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)
