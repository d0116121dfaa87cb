"""Heddle end to end (heddle §7.1, Fig. 12): rollout throughput of all of Heddle (PPS + presorted
DP + migration + annealed heterogeneous MP) vs verl-, verl*- and slime-like baselines (round-robin
scheduling; static cache-affinity / load-threshold / least in-flight placement; homogeneous MP 1)
on the coding, search and math profiles, with the lower bound (no queueing, no interference,
best MP). Same evaluation epoch, cluster and predictor for every system.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.report import BenchReport, Target, plot_path
from workers.sim.llm.baselines import heddle, slime, verl, verl_star
from workers.sim.llm.experiments import compare_systems, lower_bound, prepare_workload, summarise
from workers.sim.llm.rollout import Scenario

NAME = "heddle_end_to_end"
BASELINES = ("verl", "verl*", "slime")


def run_core(prompts: int, gpus: int, profiles: list[str]) -> dict:
    scenario = Scenario(gpu_budget=gpus, max_batch_per_gpu=48, max_trajectories_per_gpu=96)
    out: dict = {}
    for profile in profiles:
        workload = prepare_workload(profile, prompts=prompts)
        results = compare_systems(workload, [verl(), verl_star(), slime(), heddle()], scenario)
        out[profile] = {name: summarise(r) for name, r in results.items()}
        out[profile]["lower_bound"] = lower_bound(workload, scenario)
        best = max(results[b].throughput for b in BASELINES)
        out[profile]["heddle_over_best_baseline"] = results["heddle"].throughput / best
        out[profile]["heddle_over_worst_baseline"] = results["heddle"].throughput / min(
            results[b].throughput for b in BASELINES
        )
    return out


def run(quick: bool = False) -> BenchReport:
    params = (
        {"prompts": 32, "gpus": 8, "profiles": ["coding", "search", "math"]}
        if quick
        else {"prompts": 64, "gpus": 16, "profiles": ["coding", "search", "math"]}
    )
    series = run_core(**params)  # type: ignore[arg-type]
    report = BenchReport(
        NAME, quick, params={**params, "group_size": 16, "max_batch_per_gpu": 48}, series=series
    )
    report.targets.append(
        Target.at_least(
            "coding_heddle_over_best_baseline", series["coding"]["heddle_over_best_baseline"], 1.5
        )
    )
    for profile in series:
        report.targets.append(
            Target.at_least(
                f"{profile}_heddle_over_every_baseline",
                series[profile]["heddle_over_best_baseline"],
                1.0,
            )
        )
    _plot(series)
    return report


def _plot(series: dict) -> None:
    profiles = list(series)
    names = [*BASELINES, "heddle", "lower_bound"]
    fig, ax = plt.subplots(figsize=(9, 3.8))
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
    ax.legend(fontsize=8, ncol=3)
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)
