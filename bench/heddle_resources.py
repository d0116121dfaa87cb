"""Heddle trajectory-adaptive resources (heddle §6, §7.4, Fig. 16).

Adaptive MP (sort-initialised simulated annealing over the GPU budget, planned from the previous
epoch's length distribution) vs homogeneous Fix-1 (throughput-optimised), Fix-8
(latency-optimised) and, for completeness, Fix-2 and Fix-4. Scheduling (PPS) and placement (DP +
migration) are the same for all. Both engine models (``context``, ``legacy``) on the same traces.
Also the number of active trajectories over time (Fig. 16b). ``adaptive`` plans with the
context-charged planner (``SystemConfig.context_aware_planner``); the earlier mean-context
planner is reported beside it (``adaptive_mean_context_planner``).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.report import BenchReport, plot_path
from workers.sim.llm.baselines import fixed_mp, heddle
from workers.sim.llm.experiments import compare_systems, prepare_workload, summarise
from workers.sim.llm.rollout import Scenario
from workers.sim.llm.systems import ENGINES

NAME = "heddle_resources"
FIXED = (1, 2, 4, 8)
ADAPTIVE = ("adaptive", "adaptive_mean_context_planner")


def run_engine(prompts: int, gpus: int, profiles: list[str], engine: str) -> dict:
    scenario = Scenario(
        gpu_budget=gpus,
        max_batch_per_gpu=48,
        max_trajectories_per_gpu=96,
        engine=engine,  # type: ignore[arg-type]
    )
    out: dict = {"throughput": {}, "active_over_time": {}}
    for profile in profiles:
        workload = prepare_workload(profile, prompts=prompts)
        systems = [
            heddle(name=ADAPTIVE[0]),
            heddle(name=ADAPTIVE[1], context_aware_planner=False),
            *(fixed_mp(m) for m in FIXED if m <= gpus),
        ]
        results = compare_systems(workload, systems, scenario)
        out["throughput"][profile] = {name: summarise(r) for name, r in results.items()}
        fixed = [r.throughput for name, r in results.items() if name not in ADAPTIVE]
        for name in ADAPTIVE:
            out["throughput"][profile][f"{name}_over_best_fixed"] = results[name].throughput / max(
                fixed
            )
        out["active_over_time"][profile] = {
            name: [[round(t, 3), n] for t, n in r.active_over_time] for name, r in results.items()
        }
    return out


def run_core(prompts: int, gpus: int, profiles: list[str], engines: list[str]) -> dict:
    return {engine: run_engine(prompts, gpus, profiles, engine) for engine in engines}


def run(quick: bool = False) -> BenchReport:
    params = (
        {"prompts": 24, "gpus": 8, "profiles": ["search"], "engines": list(ENGINES)}
        if quick
        else {
            "prompts": 64,
            "gpus": 16,
            "profiles": ["coding", "search", "math"],
            "engines": list(ENGINES),
        }
    )
    series = run_core(**params)  # type: ignore[arg-type]
    report = BenchReport(
        NAME,
        quick,
        params={**params, "max_batch_per_gpu": 48, "mp_degrees": [1, 2, 4, 8]},
        series=series,
    )
    # No resource-manager target; the ratio is in the series (paper: 1.2–1.6×).
    _plot(series["context"])
    return report


def _plot(series: dict) -> None:
    profiles = list(series["throughput"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    names = [*ADAPTIVE, *(f"Fix-{m}" for m in FIXED)]
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        axes[0].bar(
            [p + i * width for p in range(len(profiles))],
            [series["throughput"][p][name]["throughput_tokens_per_s"] for p in profiles],
            width,
            label=name,
        )
    axes[0].set_xticks([p + width * 2 for p in range(len(profiles))], profiles)
    axes[0].set_ylabel("rollout throughput (tokens/s)")
    axes[0].legend(fontsize=8)
    curve_profile = "search" if "search" in profiles else profiles[0]
    for name, points in series["active_over_time"][curve_profile].items():
        axes[1].step([p[0] for p in points], [p[1] for p in points], where="post", label=name)
    axes[1].set_xlabel("time (s)")
    axes[1].set_ylabel(f"active trajectories ({curve_profile})")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(plot_path(NAME))
    plt.close(fig)
