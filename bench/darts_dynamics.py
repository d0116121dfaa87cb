"""Benchmark ``darts_dynamics``: does DARTS selection shorten a real policy under GRPO?

A tiny causal LM (bench.darts_lab) is warmed up on verbose demonstrations, then trained twice from
the same weights and seed: standard GRPO group sampling, and DARTS (adaptive budget, variance-based
allocation, dual-end selection, tail pruning with early stop from workers.algorithms.darts), both
keeping N·M samples per step. The mechanism under test is darts §4.1.3: selection moves the group
reward baseline, which moves the advantages.
"""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from bench.darts_lab.experiment import LabConfig, LabResult, run_lab
from bench.report import BenchReport, Target, plot_path

NAME = "darts_dynamics"


def lab_config(quick: bool) -> LabConfig:
    if quick:
        return LabConfig(
            warmup_skill_max_steps=120,
            warmup_style_steps=40,
            rl_steps=8,
            prompts_per_step=8,
            heldout_prompts=64,
            distribution_samples=2,
        )
    return LabConfig()


def _tail_mean(values: list[float], fraction: float = 0.2) -> float:
    count = max(1, round(len(values) * fraction))
    return float(np.mean(values[-count:]))


def end_of_training(result: LabResult) -> dict[str, dict[str, float]]:
    """Per arm, averages over the last 20% of steps (single steps are noisy at this size).

    Baseline shifts (μ(kept group) − μ(candidate pool), darts Eq. 3) are averaged over all steps.
    """
    summary: dict[str, dict[str, float]] = {}
    for name, arm in result.arms.items():
        steps = arm.steps
        summary[name] = {
            "tokens_generated_per_step": _tail_mean([s.tokens_generated for s in steps]),
            "generated_mean_length": _tail_mean([s.generated_mean_length for s in steps]),
            "generated_p99_length": _tail_mean([s.generated_p99_length for s in steps]),
            "kept_mean_length": _tail_mean([s.kept_mean_length for s in steps]),
            "heldout_accuracy": _tail_mean([s.heldout_accuracy for s in steps]),
            "heldout_accuracy_easy": _tail_mean([s.heldout_accuracy_easy for s in steps]),
            "heldout_accuracy_hard": _tail_mean([s.heldout_accuracy_hard for s in steps]),
            "heldout_mean_length": _tail_mean([s.heldout_mean_length for s in steps]),
            "total_budget": _tail_mean([s.total_budget for s in steps]),
            "baseline_shift_easy_all_steps": float(np.mean([s.baseline_shift_easy for s in steps])),
            "baseline_shift_hard_all_steps": float(np.mean([s.baseline_shift_hard for s in steps])),
            "tokens_generated_all_steps": float(sum(s.tokens_generated for s in steps)),
            "wall_seconds": arm.wall_seconds,
        }
    return summary


def _smooth(values: list[float], window: int = 5) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.size < window:
        return array
    kernel = np.ones(window) / window
    return np.convolve(array, kernel, mode="valid")


def plot(result: LabResult) -> dict[str, str]:
    """Length distribution before/after, and lengths, tokens and accuracy over steps."""
    figure, axes = plt.subplots(1, 2, figsize=(11, 4))
    bins = np.arange(0, 26) - 0.5
    for axis, kind in zip(axes, ("easy", "hard"), strict=True):
        axis.hist(result.initial_lengths[kind], bins=bins, alpha=0.4, label="before (warm-up)")
        for name, arm in result.arms.items():
            axis.hist(
                arm.final_lengths[kind], bins=bins, histtype="step", lw=2, label=f"after: {name}"
            )
        axis.set_title(f"{kind} prompts: sampled response lengths (held-out)")
        axis.set_xlabel("response length (tokens)")
        axis.legend()
    figure.tight_layout()
    distribution_path = plot_path(NAME, "_lengths")
    figure.savefig(distribution_path, dpi=110)
    plt.close(figure)

    figure, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [
        ("generated_mean_length", "mean generated length"),
        ("generated_p99_length", "p99 generated length"),
        ("tokens_generated", "tokens generated per step"),
        ("heldout_accuracy", "held-out accuracy"),
    ]
    for axis, (field, title) in zip(axes.ravel(), panels, strict=True):
        for index, (name, arm) in enumerate(result.arms.items()):
            values = [float(getattr(s, field)) for s in arm.steps]
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
    return {"lengths": str(distribution_path), "steps": str(steps_path)}


def run(quick: bool) -> BenchReport:
    config = lab_config(quick)
    result = run_lab(config)
    summary = end_of_training(result)
    standard, darts = summary["standard"], summary["darts"]
    token_reduction = (
        1.0 - darts["tokens_generated_per_step"] / standard["tokens_generated_per_step"]
    )
    accuracy_delta = darts["heldout_accuracy"] - standard["heldout_accuracy"]
    versus_standard = {
        name: {
            "token_reduction_per_step_at_end": 1.0
            - values["tokens_generated_per_step"] / standard["tokens_generated_per_step"],
            "heldout_accuracy_delta_at_end": values["heldout_accuracy"]
            - standard["heldout_accuracy"],
            "heldout_mean_length_ratio_at_end": values["heldout_mean_length"]
            / standard["heldout_mean_length"],
        }
        for name, values in summary.items()
        if name != "standard"
    }
    lab_json: dict[str, Any] = result.to_json()
    report = BenchReport(
        benchmark=NAME,
        quick=quick,
        params=lab_json.pop("config") | {"parameters": result.parameters},
        series={"end_of_training": summary, "versus_standard": versus_standard, **lab_json},
    )
    report.targets = [
        Target.at_least("darts_token_reduction_per_step_at_end", token_reduction, 0.2),
        Target.at_least("darts_minus_standard_heldout_accuracy", accuracy_delta, -0.02),
    ]
    report.series["plots"] = plot(result)
    return report
