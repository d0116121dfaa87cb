"""Benchmark ``darts_dynamics``: does DARTS shape a real policy's lengths under GRPO, and at what
accuracy?

The lab (``bench.darts_lab``) warms a 2.4M-parameter causal LM up on a pointer-chasing task with a
verbose, long-tailed demonstration mix (a uniform guess is right one time in ten; long chains of
look-ups are needed on most prompts; rambles make the length tail), then trains it with GRPO under
four arms from the same weights: standard, DARTS (adaptive budget), DARTS at a fixed 1.5·N·M and
Tail Batching, each over several RL seeds. DARTS comes from ``workers.algorithms.darts``
(plan_batch, GroupRollout), Tail Batching's rounds from its ``TailBatchingPlanner``.

The task is version 2 (``task.MIX_V2``): besides version 1's rambles that end in a guess, hard
prompts have "correct but verbose" chains (§3.2.2 Pattern I), which the reward does not penalise
when the chain after the ramble is right.
Version 1's full run is kept as ``darts_dynamics_task_v1.json``; ``LabConfig(task_version=1)``
reproduces its warm-up and its standard and Tail Batching arms (the DARTS arms' length moments
have changed since: censored per-prompt variance, prompts weighed equally in ``ρ_t``). The
evaluation reports how often the warmed-up model's verbose hard responses are right: the
demonstrations' verbose chains are correct, the model's need not be.

``versus_standard`` splits each arm's token ratio into samples per step × tokens
per sample: at DARTS's extra samples, the −20 % target needs tokens per sample at
``0.8 / samples ratio`` of standard's.

Targets (decided before any run): DARTS generates at least 20 % fewer tokens per training step
than standard over the run (mean over seeds), and its final held-out accuracy is not below the
95 % confidence interval of standard's; the workload check is that the warmed-up policy's longest
sampled response is at least 8× the mean (darts §3.2.1's long tail).
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from scipy import stats

from bench.darts_lab.experiment import ArmResult, LabConfig, LabResult, StepRecord, run_lab
from bench.report import BenchReport, Target, plot_path

NAME = "darts_dynamics"


def lab_config(quick: bool) -> LabConfig:
    if quick:
        return LabConfig(
            seeds=(0,),
            width=64,
            layers=2,
            heads=2,
            train_prompts=64,
            heldout_prompts=48,
            warmup_skill_max_steps=60,
            warmup_style_steps=20,
            rl_steps=4,
            prompts_per_step=8,
            eval_every=0,
            final_eval_samples=2,
        )
    return LabConfig()


def confidence_interval(values: list[float], level: float = 0.95) -> dict[str, float]:
    """Mean and Student-t interval over seeds (the half-width is 0 for a single seed)."""
    array = np.asarray(values, dtype=float)
    mean = float(array.mean())
    if array.size < 2:
        return {"mean": mean, "low": mean, "high": mean, "half_width": 0.0, "n": float(array.size)}
    half = float(
        stats.t.ppf(0.5 + level / 2.0, array.size - 1) * array.std(ddof=1) / math.sqrt(array.size)
    )
    return {
        "mean": mean,
        "low": mean - half,
        "high": mean + half,
        "half_width": half,
        "n": float(array.size),
    }


def _tail_mean(values: list[float], fraction: float = 0.2) -> float:
    count = max(1, round(len(values) * fraction))
    return float(np.mean(values[-count:]))


def _max_over_mean(step: StepRecord) -> float:
    return step.generated_max_length / max(step.generated_mean_length, 1e-9)


def run_summary(run: ArmResult, group_size: int) -> dict[str, float]:
    """One seed of one arm: per-step costs over the run and its end, and the final evaluation."""
    steps = run.steps
    tokens = [float(s.tokens_generated) for s in steps]
    return {
        "tokens_per_step": float(np.mean(tokens)),
        "tokens_per_step_last_20pct": _tail_mean(tokens),
        "tokens_per_trained_sample": float(
            sum(tokens) / max(1, sum(s.samples_kept for s in steps))
        ),
        "decode_positions_per_step": float(np.mean([s.generated_max_length for s in steps])),
        "decode_positions_last_20pct": _tail_mean([float(s.generated_max_length) for s in steps]),
        # how long the long tail lasts under training: a step's longest sample over its mean
        "step_max_over_mean_first_5": float(np.mean([_max_over_mean(s) for s in steps[:5]])),
        "step_max_over_mean_median": float(np.median([_max_over_mean(s) for s in steps])),
        "generated_mean_length": float(np.mean([s.generated_mean_length for s in steps])),
        "kept_mean_length": float(np.mean([s.kept_mean_length for s in steps])),
        "samples_generated_per_step": float(np.mean([s.samples_generated for s in steps])),
        "tokens_per_generated_sample": float(
            sum(tokens) / max(1, sum(s.samples_generated for s in steps))
        ),
        "verbose_share_first_5": float(np.mean([s.verbose_share for s in steps[:5]])),
        "verbose_share_last_20pct": _tail_mean([s.verbose_share for s in steps]),
        "budget_multiple_of_NM": float(
            np.mean([s.total_budget / max(1, s.prompts_trained * group_size) for s in steps])
        ),
        "pruned_prompt_share": float(
            np.mean([s.pruned_prompts / max(1, s.prompts_trained) for s in steps])
        ),
        "heldout_accuracy": run.final["accuracy"],
        "heldout_accuracy_easy": run.final["accuracy_easy"],
        "heldout_accuracy_hard": run.final["accuracy_hard"],
        "heldout_mean_length": run.final["mean_length"],
        "heldout_max_over_mean_length": run.final["max_over_mean_length"],
        "wall_seconds": run.wall_seconds,
        "cpu_seconds": run.cpu_seconds,
    }


def summarise(result: LabResult) -> dict[str, dict[str, Any]]:
    """Per arm: every seed's summary, and each figure's mean with its 95 % interval over seeds."""
    summary: dict[str, dict[str, Any]] = {}
    for name, runs in result.arms.items():
        per_seed = [run_summary(r, result.config.group_size) for r in runs]
        summary[name] = {
            "per_seed": per_seed,
            "across_seeds": {
                key: confidence_interval([s[key] for s in per_seed]) for key in per_seed[0]
            },
        }
    return summary


def versus_standard(result: LabResult) -> dict[str, dict[str, Any]]:
    """Per arm and seed, tokens per step paired with standard's (same seed, same prompt order)."""
    standard = [run_summary(r, result.config.group_size) for r in result.arms["standard"]]
    comparison: dict[str, dict[str, Any]] = {}
    for name, runs in result.arms.items():
        if name == "standard":
            continue
        reductions = [
            1.0
            - run_summary(r, result.config.group_size)["tokens_per_step"] / base["tokens_per_step"]
            for r, base in zip(runs, standard, strict=True)
        ]
        accuracy_deltas = [
            run_summary(r, result.config.group_size)["heldout_accuracy"] - base["heldout_accuracy"]
            for r, base in zip(runs, standard, strict=True)
        ]
        arm = [run_summary(r, result.config.group_size) for r in runs]

        def ratio(key: str, arm: list[dict[str, float]] = arm) -> float:
            return float(np.mean([a[key] for a in arm]) / np.mean([b[key] for b in standard]))

        samples = ratio("samples_generated_per_step")
        comparison[name] = {
            # tokens per step = samples per step × tokens per sample, over the whole run
            "token_ratio_decomposition": {
                "tokens_per_step_ratio": ratio("tokens_per_step"),
                "samples_per_step_ratio": samples,
                "tokens_per_sample_ratio": ratio("tokens_per_generated_sample"),
                "tokens_per_sample_ratio_needed_for_target": 0.8 / samples,
            },
            "token_reduction_per_step_by_seed": reductions,
            "token_reduction_per_step_median": float(np.median(reductions)),
            "heldout_accuracy_delta_by_seed": accuracy_deltas,
            "heldout_accuracy_delta": confidence_interval(accuracy_deltas),
        }
    return comparison


def _smooth(values: list[float], window: int = 5) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.size < window:
        return array
    return np.convolve(array, np.ones(window) / window, mode="valid")


def plot(result: LabResult) -> dict[str, str]:
    """Held-out length distributions before and after, and per-step costs (seed 0)."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    bins = np.arange(0, 100, 3) - 0.5
    for axis, kind in zip(axes, ("easy", "hard"), strict=True):
        before = result.initial.lengths_easy if kind == "easy" else result.initial.lengths_hard
        axis.hist(before, bins=bins, alpha=0.4, label="before (warm-up)")
        for name, runs in result.arms.items():
            axis.hist(
                runs[0].final_lengths[kind],
                bins=bins,
                histtype="step",
                lw=2,
                label=f"after: {name}",
            )
        axis.set_yscale("log")
        axis.set_title(f"{kind} prompts: held-out response lengths (seed 0)")
        axis.set_xlabel("response length (tokens)")
        axis.legend()
    figure.tight_layout()
    lengths_path = plot_path(NAME, "_lengths")
    figure.savefig(lengths_path, dpi=110)
    plt.close(figure)

    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = [
        ("tokens_generated", "tokens generated per step"),
        ("generated_mean_length", "mean generated length"),
        ("generated_max_length", "longest sample per step (decode positions)"),
    ]
    for axis, (attribute, title) in zip(axes, panels, strict=True):
        for index, (name, runs) in enumerate(result.arms.items()):
            values = [float(getattr(s, attribute)) for s in runs[0].steps]
            smoothed = _smooth(values)
            axis.plot(values, alpha=0.2, color=f"C{index}")
            axis.plot(np.arange(len(smoothed)) + 2, smoothed, color=f"C{index}", label=name)
        axis.set_title(title)
        axis.set_xlabel("GRPO step")
        axis.legend()
    figure.tight_layout()
    steps_path = plot_path(NAME, "_steps")
    figure.savefig(steps_path, dpi=110)
    plt.close(figure)
    return {"lengths": str(lengths_path), "steps": str(steps_path)}


def targets(result: LabResult, summary: dict[str, dict[str, Any]]) -> list[Target]:
    standard = summary["standard"]["across_seeds"]
    darts = summary["darts"]["across_seeds"]
    reduction = 1.0 - darts["tokens_per_step"]["mean"] / standard["tokens_per_step"]["mean"]
    accuracy_margin = darts["heldout_accuracy"]["mean"] - standard["heldout_accuracy"]["low"]
    return [
        Target.at_least("darts_token_reduction_per_step_vs_standard", reduction, 0.2),
        Target.at_least("darts_heldout_accuracy_minus_standard_ci_low", accuracy_margin, 0.0),
        Target.at_least(
            "warmup_policy_max_over_mean_length", result.initial.max_over_mean_length, 8.0
        ),
    ]


def run(quick: bool) -> BenchReport:
    config = lab_config(quick)
    result = run_lab(config)
    summary = summarise(result)
    lab_json: dict[str, Any] = result.to_json()
    report = BenchReport(
        benchmark=NAME,
        quick=quick,
        params=lab_json.pop("config") | {"parameters": result.parameters},
        series={
            "summary": {name: block["across_seeds"] for name, block in summary.items()},
            "per_seed": {name: block["per_seed"] for name, block in summary.items()},
            "versus_standard": versus_standard(result),
            **lab_json,
        },
    )
    report.targets = targets(result, summary)
    if not quick:
        report.series["plots"] = plot(result)
    return report
