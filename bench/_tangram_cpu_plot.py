"""``tangram_cpu.png``: mean ACT by batch size, and the regime sweep as one heat map per reward
share (best fixed DoP / elastic, the best fixed DoP written in each cell)."""

from __future__ import annotations

from typing import Any

from bench._tangram_cpu_sim import FIXED_DOPS
from bench.report import plot_mean_act_by_batch, plot_path

BY_BATCH_APPROACHES = (
    "elastic",
    "elastic_paper_estimate",
    *(f"fixed_dop_{d}" for d in FIXED_DOPS),
    "static_pods",
    "static_pods_equal_exec",
    "lower_bound",
)


def plot(rows: list[dict[str, Any]], sweep: list[dict[str, Any]], name: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shares = list(dict.fromkeys(p["reward_share"] for p in sweep))
    fig, axes = plt.subplots(
        1, 1 + len(shares), figsize=(5.5 + 4.5 * len(shares), 4.2), layout="constrained"
    )
    ax = axes[0]
    plot_mean_act_by_batch(ax, rows, BY_BATCH_APPROACHES)
    ax.set_xlabel("RL batch size (trajectories)")
    ax.set_title(f"AI coding, {rows[0]['nodes']} nodes x {rows[0]['cores_per_node']} cores")
    ax.legend(fontsize=7)
    medians = sorted({p["reward_median_s"] for p in sweep})
    bursts = list(dict.fromkeys(p["burstiness"] for p in sweep))
    image = None
    for ax, share in zip(axes[1:], shares, strict=True):
        cells = {
            (p["burstiness"], p["reward_median_s"]): p for p in sweep if p["reward_share"] == share
        }
        values = [[cells[(b, m)]["best_fixed_over_elastic"] for m in medians] for b in bursts]
        image = ax.imshow(values, cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto")
        for i, burst in enumerate(bursts):
            for j, median in enumerate(medians):
                point = cells[(burst, median)]
                ax.text(
                    j,
                    i,
                    f"{point['best_fixed_over_elastic']:.2f}\nDoP {point['best_fixed_dop']}",
                    ha="center",
                    va="center",
                    fontsize=7,
                )
        ax.set_xticks(range(len(medians)), [f"{m:g}" for m in medians])
        ax.set_yticks(range(len(bursts)), bursts if ax is axes[1] else [])
        ax.set_xlabel("reward median T1 (s)")
        ax.set_title(f"best fixed / elastic: {share}", fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=list(axes[1:]), shrink=0.8, label="best fixed DoP / elastic")
    path = plot_path(name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name
