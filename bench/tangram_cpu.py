"""AI coding on a CPU pool: mean ACT vs RL batch size (arl-tangram §6.3 Fig. 8a, §6.4 Fig. 9),
static pods at their honest best, and a regime sweep against the best fixed DoP.

Approaches, all on the same generated trace per batch size (``workers/sim/tangram``):
ARL-Tangram elastic (Alg. 1, depth 2, DoP 1–32), the same with the paper's Alg. 2 estimate
(``elastic_paper_estimate``: every remaining action at one core), fixed DoP 4, 8, 16 and 32
(same scheduler, policy "fixed-dop"), Kubernetes-like static provisioning (pod per
trajectory, 0.5 CPU request / 4 CPU limit) in two settings (``bench/_tangram_cpu_pods.py``:
the legacy one, and one with Loom's per-exec overhead and Kubernetes' documented defaults),
and the lower bound (no queueing, best DoP). Pool: 5 nodes (8 NUMA nodes each) × 256 cores =
1 280 cores as in §6.3;
``--quick`` runs one such node with batch sizes / 5.

Series: ``by_batch`` (Fig. 8a left), ``by_cores_at_1280`` (Fig. 8a right; full run only),
``static_pods_sensitivity`` (pod start × per-exec overhead × creation rate, at the target
batch), and ``regime_sweep`` (``bench/_tangram_cpu_sweep.py``: reward share × reward median ×
burstiness, elastic vs the best of fixed DoP 4/8/16/32 per point).

Workload and overheads are modelling assumptions, written in ``params``: see
``workers/sim/tangram/workloads.py`` (AiCodingParams) and ``baselines.PodParams``. The reward
duration was calibrated so that ARL-Tangram barely queues at batch 1 280 on 1 280 cores, as in
the paper's Table 1 (queueing 0.015 vs execution 0.975).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from bench._tangram_cpu_plot import plot
from bench._tangram_cpu_pods import EQUAL_EXEC, LEGACY, sensitivity, summarise_sensitivity
from bench._tangram_cpu_sim import (
    AOE_OVERHEAD_S,
    CORES_PER_NODE,
    FIXED_DOPS,
    FULL_NODES,
    NUMA_PER_NODE,
    cpu_scheduler,
    run_tangram,
    scaled_to,
)
from bench._tangram_cpu_sweep import PAPER_ESTIMATE, grid_params, run_sweep, summarise
from bench.report import BenchReport, Target
from workers.sim.tangram.baselines import lower_bound, simulate_static_pods
from workers.sim.tangram.results import SimResult
from workers.sim.tangram.workloads import AiCodingParams, ai_coding_trace

FULL_BATCHES = (128, 256, 512, 768, 1024, 1280, 1536)
TARGET_BATCH = 1280
FULL_CORES_AT_1280 = (152, 208, 256, 304)


@functools.cache  # by_cores at 256 cores is by_batch's row at 1 280: run it once
def compare(batch: int, nodes: int, cores: int, seed: int = 0) -> dict[str, dict[str, Any]]:
    trace = ai_coding_trace(batch, seed=seed)
    results: dict[str, SimResult] = {"elastic": run_tangram(trace, nodes, cores, "elastic")}
    results[PAPER_ESTIMATE] = run_tangram(trace, nodes, cores, "elastic", rest_model="minimum")
    for dop in FIXED_DOPS:
        results[f"fixed_dop_{dop}"] = run_tangram(trace, nodes, cores, "fixed-dop", dop)
    results["static_pods"] = simulate_static_pods(trace, nodes, cores, scaled_to(LEGACY, nodes))
    results["static_pods_equal_exec"] = simulate_static_pods(
        trace, nodes, cores, scaled_to(EQUAL_EXEC, nodes)
    )
    results["lower_bound"] = lower_bound(trace, {"cpu": cores})
    return {name: result.summary() for name, result in results.items()}


def _best_fixed(approaches: dict[str, dict[str, Any]]) -> tuple[int, float]:
    dop = min(FIXED_DOPS, key=lambda d: (approaches[f"fixed_dop_{d}"]["mean_act_s"], d))
    return dop, approaches[f"fixed_dop_{dop}"]["mean_act_s"]


def _row(**fields: Any) -> dict[str, Any]:
    """One configuration's approaches, with the best fixed DoP picked out."""
    approaches = fields["approaches"]
    dop, act = _best_fixed(approaches)
    return fields | {
        "best_fixed_dop": dop,
        "best_fixed_over_elastic": act / approaches["elastic"]["mean_act_s"],
    }


def run(quick: bool) -> BenchReport:
    # --quick keeps the 256-core node (trajectories stay on one node, so a node is the unit of
    # the regime) and runs 1 node with batch sizes / 5, i.e. the same load per node.
    nodes = 1 if quick else FULL_NODES
    cores = CORES_PER_NODE
    batches = [b * nodes // FULL_NODES for b in (FULL_BATCHES[::2] if quick else FULL_BATCHES)]
    target_batch = TARGET_BATCH * nodes // FULL_NODES
    if target_batch not in batches:
        batches = sorted({*batches, target_batch})
    rows = [
        _row(batch=b, nodes=nodes, cores_per_node=cores, approaches=compare(b, nodes, cores))
        for b in batches
    ]
    series: dict[str, Any] = {"by_batch": rows}
    if not quick:  # Fig. 8a right: batch 1 280, vary the pool
        series["by_cores_at_1280"] = [
            _row(cores_per_node=c, total_cores=c * nodes, approaches=compare(1280, nodes, c))
            for c in FULL_CORES_AT_1280
        ]
    at = next(r for r in rows if r["batch"] == target_batch)["approaches"]
    elastic = at["elastic"]["mean_act_s"]
    pods = sensitivity(ai_coding_trace(target_batch, seed=0), nodes, cores, elastic)
    series["static_pods_sensitivity"] = pods
    series["static_pods_sensitivity_summary"] = summarise_sensitivity(pods)
    sweep = run_sweep(quick, nodes)
    summary = summarise(sweep)
    series["regime_sweep"] = sweep
    series["regime_sweep_summary"] = summary
    series["plot"] = plot(rows, sweep, "tangram_cpu")
    report = BenchReport(
        benchmark="tangram_cpu",
        quick=quick,
        params={
            "nodes": nodes,
            "cores_per_node": cores,
            "numa_per_node": NUMA_PER_NODE,
            "batches": batches,
            "scale": "1 node, batch / 5 (same load per node)" if quick else "paper's",
            "scheduler": cpu_scheduler(nodes, cores, "elastic").policy(),
            "rest_model": cpu_scheduler(nodes, cores, "elastic").rest_model,
            "candidate_cap": cpu_scheduler(nodes, cores, "elastic").candidate_cap,
            "paper_estimate": f"{PAPER_ESTIMATE} = elastic with rest_model='minimum'",
            "fixed_dops": list(FIXED_DOPS),
            "aoe_overhead_s": AOE_OVERHEAD_S,
            "workload": dataclasses.asdict(AiCodingParams()),
            "static_pods": dataclasses.asdict(scaled_to(LEGACY, nodes)),
            "static_pods_equal_exec": dataclasses.asdict(scaled_to(EQUAL_EXEC, nodes)),
            "static_pods_settings": (
                "static_pods = the legacy setting (2 s start, 50 pods/s without burst, 0.1 s "
                "per exec); static_pods_equal_exec = kube-scheduler's 50 QPS / burst 100, 2 s "
                "start, Loom's per-exec overhead (aoe_overhead_s)"
            ),
            "regime_sweep": grid_params(quick),
            "seed": 0,
        },
        series=series,
    )
    low = rows[0]["approaches"]
    report.targets += [
        Target.at_least(
            "static_over_elastic_mean_act_at_1280", at["static_pods"]["mean_act_s"] / elastic, 3.0
        ),
        Target.at_least(
            "static_equal_exec_over_elastic_mean_act_at_1280",
            at["static_pods_equal_exec"]["mean_act_s"] / elastic,
            2.0,
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
        Target.at_least(
            "reward_heavy_best_fixed_over_elastic_geomean",
            summary["reward_heavy_geomean_best_fixed_over_elastic"],
            1.3,
        ),
        Target.at_least(
            "sweep_min_best_fixed_over_elastic",
            summary["all_points_min_best_fixed_over_elastic"],
            0.95,
        ),
    ]
    return report
