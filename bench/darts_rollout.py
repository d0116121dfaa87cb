"""Benchmark ``darts_rollout``: DARTS rollout shaping on heavy-tailed batches (darts §4–§5).

Same batches, same random lengths, four strategies on simulated LLM workers (workers.sim.darts):
standard GRPO, uniform over-sampling, DARTS without and with tail pruning / early stop. Also times
the pure planning path (budget + Alg. 1 allocation + Alg. 2 selection) for 512 prompts × 16.
"""

from __future__ import annotations

import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.report import BenchReport, Target, plot_path
from workers.algorithms.darts import DartsConfig, plan_batch, select_training_groups
from workers.sim.darts.scenario import ScenarioConfig, make_prompt_set, run_batch

NAME = "darts_rollout"
STRATEGIES = ("standard", "uniform", "darts_no_pruning", "darts")


def time_planning(prompts: int, group_size: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """Wall time of plan_batch + select_training_groups for one batch (median over repeats)."""
    rng = np.random.default_rng(seed)
    config = DartsConfig(group_size=group_size)
    upper = config.upper_bound
    samples: list[float] = []
    for _ in range(repeats):
        stds = rng.lognormal(6.0, 1.0, prompts)
        lengths = rng.lognormal(6.5, 1.0, (prompts, upper))
        truncated = lengths > 4000
        started = time.perf_counter()
        plan = plan_batch(
            stds, config=config, rho=0.8, cost_slope=1.0, total_budget=prompts * group_size * 3 // 2
        )
        present = np.arange(upper)[None, :] < plan.allocations[:, None]
        kept = select_training_groups(
            lengths, present, truncated, plan.shortest_only, group_size=group_size
        )
        samples.append(time.perf_counter() - started)
        assert int(kept.sum()) == prompts * group_size
    return {
        "median_ms": float(np.median(samples) * 1e3),
        "p90_ms": float(np.percentile(samples, 90) * 1e3),
    }


def run_scenario(config: ScenarioConfig, batches: int, seed: int) -> dict[str, dict[str, list]]:
    """Per strategy, per batch: rollout time, tokens, aborts, and the kept/generated lengths."""
    series: dict[str, dict[str, list]] = {
        name: {
            "rollout_seconds": [],
            "tokens_generated": [],
            "samples_submitted": [],
            "samples_aborted": [],
            "kept_lengths": [],
            "generated_lengths": [],
        }
        for name in STRATEGIES
    }
    for batch in range(batches):
        rng = np.random.default_rng(seed + batch)
        profiles = make_prompt_set(config, rng)
        comparison = run_batch(config, rng, profiles)
        for name, result in comparison.strategies.items():
            entry = series[name]
            entry["rollout_seconds"].append(result.rollout_seconds)
            entry["tokens_generated"].append(result.tokens_generated)
            entry["samples_submitted"].append(result.samples_submitted)
            entry["samples_aborted"].append(result.samples_aborted)
            entry["kept_lengths"].extend(result.kept_lengths)
            entry["generated_lengths"].extend(result.generated_lengths)
    return series


def summarise(series: dict[str, dict[str, list]]) -> dict[str, dict[str, float]]:
    summary = {}
    for name, entry in series.items():
        kept = np.asarray(entry["kept_lengths"], dtype=float)
        summary[name] = {
            "rollout_seconds_total": float(np.sum(entry["rollout_seconds"])),
            "tokens_generated_total": float(np.sum(entry["tokens_generated"])),
            "kept_mean_length": float(kept.mean()),
            "kept_p99_length": float(np.percentile(kept, 99)),
            "samples_aborted_total": float(np.sum(entry["samples_aborted"])),
        }
    return summary


def plot(series: dict[str, dict[str, list]], summary: dict[str, dict[str, float]]) -> str:
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    bins = np.linspace(0, 8192, 41)
    for name in ("standard", "darts"):
        left.hist(series[name]["kept_lengths"], bins=bins, alpha=0.55, label=f"{name} kept")
    left.set_xlabel("response length (tokens)")
    left.set_ylabel("kept samples")
    left.set_yscale("log")
    left.set_title("kept-group length distribution")
    left.legend()
    names = list(summary)
    right.bar(names, [summary[n]["rollout_seconds_total"] for n in names], color="tab:blue")
    right.set_ylabel("batch rollout time, summed over batches (virtual s)")
    right.set_title("rollout time by strategy")
    right.tick_params(axis="x", rotation=15)
    figure.tight_layout()
    path = plot_path(NAME)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return str(path)


def run(quick: bool) -> BenchReport:
    config = ScenarioConfig(prompts=32 if quick else 64)
    batches = 3 if quick else 16
    seed = 2024
    series = run_scenario(config, batches, seed)
    summary = summarise(series)
    planning = time_planning(prompts=512, group_size=16, repeats=20 if quick else 100)
    standard, darts = summary["standard"], summary["darts"]
    speedup = standard["rollout_seconds_total"] / darts["rollout_seconds_total"]
    report = BenchReport(
        benchmark=NAME,
        quick=quick,
        params={
            "prompts": config.prompts,
            "group_size": config.group_size,
            "workers": config.workers,
            "max_batch": config.max_batch,
            "max_length": config.max_length,
            "concise_fraction": config.concise_fraction,
            "verbose_fraction": config.verbose_fraction,
            "history_epochs": config.history_epochs,
            "budget_target_multiple": config.budget_target_multiple,
            "batches": batches,
            "seed": seed,
            "ptl": {"y0": config.ptl.y0, "slopes": config.ptl.slopes},
        },
        series={
            "summary": summary,
            "per_batch": {
                name: {k: v for k, v in entry.items() if not k.endswith("lengths")}
                for name, entry in series.items()
            },
            "planning_512x16": planning,
        },
    )
    report.targets = [
        Target.at_least("darts_rollout_speedup_vs_standard", speedup, 1.3),
        Target.is_true(
            "darts_kept_mean_length_below_standard",
            darts["kept_mean_length"] < standard["kept_mean_length"],
        ),
        Target.is_true(
            "darts_kept_p99_length_below_standard",
            darts["kept_p99_length"] < standard["kept_p99_length"],
        ),
        Target.at_most("planning_512x16_median_ms", planning["median_ms"], 5.0),
    ]
    report.series["plot"] = plot(series, summary)
    return report
