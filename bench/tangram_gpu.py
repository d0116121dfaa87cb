"""MOPD on a GPU pool: mean ACT vs batch size for 10 teacher services on 5 × 8 GPUs, and the GPUs
each approach needs for the same ACT (arl-tangram §6.3, Fig. 8b).

Approaches on the same generated trace: ARL-Tangram (elastic DoP over {1,2,4,8}, buddy chunks,
service cache with LRU eviction and restore from CPU memory), isolated per-service GPU groups
(SGLang-like: each model on its own 4 GPUs, TP=4, always resident), ServerlessLLM-like
load-on-demand (same pool, DoP fixed at 4, no elastic reallocation, 3× slower restore), and the
lower bound (best DoP, no queueing, no restore). Workload and restore speeds are assumptions in
``workers/sim/tangram/workloads.py`` (MopdParams), written to ``params``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.report import BenchReport, Target, plot_path
from workers.algorithms.tangram import ElasticScheduler, GpuTopology
from workers.sim.tangram.baselines import (
    SERVERLESS_LOAD_MULTIPLIER,
    lower_bound,
    simulate_isolated_services,
)
from workers.sim.tangram.results import SimResult
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import Trace
from workers.sim.tangram.workloads import MopdParams, mopd_services, mopd_trace

NODES = 5
GPUS_PER_NODE = 8
ISOLATED_GPUS_PER_SERVICE = 4
FULL_BATCHES = (256, 512, 1024, 2048, 3072, 4096)
SAVING_BATCH = 1024  # §6.3 Fig. 8b right
CONGESTED_BATCH = 2048  # §6.3: "At batch size 2048, ARL-Tangram reduces the average ACT by 18.1x"


def run_pool(trace: Trace, nodes: int, algorithm: str, load_multiplier: float = 1.0) -> SimResult:
    topology = GpuTopology(
        [f"gpu-{i}" for i in range(nodes)],
        mopd_services(),
        gpus_per_node=GPUS_PER_NODE,
        load_multiplier=load_multiplier,
    )
    scheduler = ElasticScheduler(topology, depth=2, algorithm=algorithm, fixed_dop=4)
    result = TangramSimulation(trace, {"gpu": scheduler}).run()
    result.extra["service_loads"] = topology.loads
    result.extra["evictions"] = topology.evictions
    return result


def compare(batch: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    trace = mopd_trace(batch, seed=seed)
    results = {
        "tangram": run_pool(trace, NODES, "elastic"),
        "isolated_sglang": simulate_isolated_services(trace, ISOLATED_GPUS_PER_SERVICE),
        "serverless_llm": run_pool(trace, NODES, "fixed-dop", SERVERLESS_LOAD_MULTIPLIER),
        "lower_bound": lower_bound(trace, {"gpu": GPUS_PER_NODE}),
    }
    return {name: result.summary() for name, result in results.items()}


def gpus_for_same_act(batch: int, seed: int = 0) -> dict[str, Any]:
    """Smallest Tangram pool (in 8-GPU nodes) whose mean ACT ≤ the isolated services' ACT."""
    trace = mopd_trace(batch, seed=seed)
    isolated = simulate_isolated_services(trace, ISOLATED_GPUS_PER_SERVICE).mean_act()
    isolated_gpus = ISOLATED_GPUS_PER_SERVICE * MopdParams().services
    sweep = []
    needed = None
    for nodes in range(1, NODES + 1):
        act = run_pool(trace, nodes, "elastic").mean_act()
        sweep.append({"gpus": nodes * GPUS_PER_NODE, "mean_act_s": act})
        if needed is None and act <= isolated:
            needed = nodes * GPUS_PER_NODE
            break
    return {
        "batch": batch,
        "isolated_gpus": isolated_gpus,
        "isolated_mean_act_s": isolated,
        "tangram_sweep": sweep,
        "tangram_gpus_needed": needed,
        "fraction": (needed / isolated_gpus) if needed else float("inf"),
    }


def _plot(rows: list[dict[str, Any]], saving: dict[str, Any]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for approach in ("tangram", "isolated_sglang", "serverless_llm", "lower_bound"):
        left.plot(
            [r["batch"] for r in rows],
            [r["approaches"][approach]["mean_act_s"] for r in rows],
            marker="o",
            label=approach,
        )
    left.set_yscale("log")
    left.set_xlabel("RL batch size")
    left.set_ylabel("mean ACT (s)")
    left.set_title(f"MOPD, 10 services, {NODES}x{GPUS_PER_NODE} GPUs")
    left.legend(fontsize=8)
    sweep = saving["tangram_sweep"]
    right.plot(
        [s["gpus"] for s in sweep], [s["mean_act_s"] for s in sweep], marker="o", label="tangram"
    )
    right.axhline(saving["isolated_mean_act_s"], color="red", label="isolated, 40 GPUs")
    right.set_xlabel("GPUs")
    right.set_ylabel("mean ACT (s)")
    right.set_title(f"batch {saving['batch']}: GPUs for the same ACT")
    right.legend(fontsize=8)
    path = plot_path("tangram_gpu")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def run(quick: bool) -> BenchReport:
    batches = [256, CONGESTED_BATCH] if quick else list(FULL_BATCHES)
    rows: list[dict[str, Any]] = [{"batch": b, "approaches": compare(b)} for b in batches]
    saving = gpus_for_same_act(SAVING_BATCH)
    report = BenchReport(
        benchmark="tangram_gpu",
        quick=quick,
        params={
            "nodes": NODES,
            "gpus_per_node": GPUS_PER_NODE,
            "isolated_gpus_per_service": ISOLATED_GPUS_PER_SERVICE,
            "batches": batches,
            "congested_batch": CONGESTED_BATCH,
            "saving_batch": SAVING_BATCH,
            "scheduler": {"depth": 2, "dop": [1, 2, 4, 8]},
            "serverless_load_multiplier": SERVERLESS_LOAD_MULTIPLIER,
            "workload": dataclasses.asdict(MopdParams()),
            "gpu_memory_mb": 80_000,
            "seed": 0,
        },
        series={"by_batch": rows, "gpus_for_same_act": saving},
    )
    report.series["plot"] = _plot(rows, saving)
    congested = next(r for r in rows if r["batch"] == CONGESTED_BATCH)["approaches"]
    uncongested = rows[0]["approaches"]
    report.targets += [
        Target.at_least(
            "isolated_over_tangram_mean_act_congested",
            congested["isolated_sglang"]["mean_act_s"] / congested["tangram"]["mean_act_s"],
            2.0,
        ),
        Target.at_most("tangram_gpu_fraction_for_same_act", saving["fraction"], 0.4),
        Target.at_most(
            "uncongested_tangram_over_lower_bound",
            uncongested["tangram"]["mean_act_s"] / uncongested["lower_bound"]["mean_act_s"],
            1.5,
        ),
    ]
    return report
