"""AI coding on a CPU pool: mean ACT vs RL batch size (arl-tangram §6.3 Fig. 8a, §6.4 Fig. 9).

Approaches, all on the same generated trace per batch size (``workers/sim/tangram``):
ARL-Tangram elastic (Alg. 1, depth 2, DoP 1–32), fixed DoP 4 and 16 (same scheduler, policy
"fixed-dop"), Kubernetes-like static provisioning (pod per trajectory, 0.5 CPU request / 4 CPU
limit), and the lower bound (no queueing, best DoP). Pool: 5 nodes (8 NUMA nodes each) × 256
cores = 1 280 cores as in §6.3; ``--quick`` runs one such node with batch sizes / 5.

Workload and overheads are modelling assumptions, written in ``params``: see
``workers/sim/tangram/workloads.py`` (AiCodingParams) and ``baselines.PodParams``. The reward
duration was calibrated so that ARL-Tangram barely queues at batch 1 280 on 1 280 cores, as in
the paper's Table 1 (queueing 0.015 vs execution 0.975). AOE's per-action overhead (cpuset
update + exec) is 20 ms (Table 1: system overhead ≈ 2.5% of execution).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.report import BenchReport, Target, plot_path
from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler
from workers.sim.tangram.baselines import PodParams, lower_bound, simulate_static_pods
from workers.sim.tangram.results import SimResult
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import Trace
from workers.sim.tangram.workloads import AiCodingParams, ai_coding_trace

FULL_NODES = 5
NUMA_PER_NODE = 8
MEMORY_MB = 2_400_000  # 2.4 TB per node (§6.1)
AOE_OVERHEAD_S = 0.02
FULL_BATCHES = (128, 256, 512, 768, 1024, 1280, 1536)
TARGET_BATCH = 1280


def run_tangram(
    trace: Trace, nodes_count: int, cores: int, algorithm: str, fixed_dop: int = 4
) -> SimResult:
    nodes = [
        CpuNodeSpec.uniform(f"cpu-{i}", cores, NUMA_PER_NODE, MEMORY_MB) for i in range(nodes_count)
    ]
    scheduler = ElasticScheduler(
        CpuTopology(nodes), depth=2, algorithm=algorithm, fixed_dop=fixed_dop
    )
    simulation = TangramSimulation(trace, {"cpu": scheduler}, overhead_s={"cpu": AOE_OVERHEAD_S})
    return simulation.run()


def pod_params(nodes: int) -> PodParams:
    """The control plane serves the whole cluster: a 1-node run gets its 1/5 share."""
    base = PodParams()
    return dataclasses.replace(base, pods_per_second=base.pods_per_second * nodes / FULL_NODES)


def compare(batch: int, nodes: int, cores: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    trace = ai_coding_trace(batch, seed=seed)
    results = {
        "elastic": run_tangram(trace, nodes, cores, "elastic"),
        "fixed_dop_4": run_tangram(trace, nodes, cores, "fixed-dop", 4),
        "fixed_dop_16": run_tangram(trace, nodes, cores, "fixed-dop", 16),
        "static_pods": simulate_static_pods(trace, nodes, cores, pod_params(nodes)),
        "lower_bound": lower_bound(trace, {"cpu": cores}),
    }
    return {name: result.summary() for name, result in results.items()}


def _plot(rows: list[dict[str, Any]], name: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for approach in ("elastic", "fixed_dop_4", "fixed_dop_16", "static_pods", "lower_bound"):
        ax.plot(
            [r["batch"] for r in rows],
            [r["approaches"][approach]["mean_act_s"] for r in rows],
            marker="o",
            label=approach,
        )
    ax.set_xlabel("RL batch size (trajectories)")
    ax.set_ylabel("mean ACT (s)")
    ax.set_yscale("log")
    ax.set_title(f"AI coding, {rows[0]['nodes']} nodes x {rows[0]['cores_per_node']} cores")
    ax.legend(fontsize=8)
    path = plot_path(name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path.name


def run(quick: bool) -> BenchReport:
    # --quick keeps the 256-core node (trajectories stay on one node, so a node is the unit of
    # the regime) and runs 1 node with batch sizes / 5, i.e. the same load per node.
    nodes = 1 if quick else FULL_NODES
    cores = 256
    batches = [b * nodes // FULL_NODES for b in (FULL_BATCHES[::2] if quick else FULL_BATCHES)]
    target_batch = TARGET_BATCH * nodes // FULL_NODES
    if target_batch not in batches:
        batches = sorted({*batches, target_batch})
    rows: list[dict[str, Any]] = []
    for batch in batches:
        rows.append(
            {
                "batch": batch,
                "nodes": nodes,
                "cores_per_node": cores,
                "approaches": compare(batch, nodes, cores),
            }
        )
    series: dict[str, Any] = {"by_batch": rows}
    if not quick:  # Fig. 8a right: batch 1 280, vary the pool
        series["by_cores_at_1280"] = [
            {"cores_per_node": c, "total_cores": c * nodes, "approaches": compare(1280, nodes, c)}
            for c in (152, 208, 256, 304)
        ]
    series["plot"] = _plot(rows, "tangram_cpu")
    report = BenchReport(
        benchmark="tangram_cpu",
        quick=quick,
        params={
            "nodes": nodes,
            "cores_per_node": cores,
            "numa_per_node": NUMA_PER_NODE,
            "batches": batches,
            "scale": "1 node, batch / 5 (same load per node)" if quick else "paper's",
            "scheduler": {"depth": 2, "dop": "1-32", "estimate_window": 128},
            "aoe_overhead_s": AOE_OVERHEAD_S,
            "workload": dataclasses.asdict(AiCodingParams()),
            "static_pods": dataclasses.asdict(pod_params(nodes)),
            "seed": 0,
        },
        series=series,
    )
    at = next(r for r in rows if r["batch"] == target_batch)["approaches"]
    low = rows[0]["approaches"]
    elastic = at["elastic"]["mean_act_s"]
    report.targets += [
        Target.at_least(
            "static_over_elastic_mean_act_at_1280", at["static_pods"]["mean_act_s"] / elastic, 3.0
        ),
        Target.at_least(
            "fixed_dop4_over_elastic_mean_act_at_1280",
            at["fixed_dop_4"]["mean_act_s"] / elastic,
            1.8,
        ),
        Target.at_most(
            "uncongested_elastic_over_lower_bound",
            low["elastic"]["mean_act_s"] / low["lower_bound"]["mean_act_s"],
            1.5,
        ),
    ]
    return report
