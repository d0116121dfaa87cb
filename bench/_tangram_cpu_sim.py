"""The CPU pool every ``tangram_cpu`` series runs on, and one approach run on one trace."""

from __future__ import annotations

import dataclasses

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler
from workers.sim.tangram.baselines import PodParams
from workers.sim.tangram.results import SimResult
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import Trace

FULL_NODES = 5  # 5 nodes x 256 cores = 1 280 cores (arl-tangram §6.3, Fig. 8a)
CORES_PER_NODE = 256  # §6.1: "15 nodes, each with 256 AMD CPU cores and 2.4 TB of memory"
NUMA_PER_NODE = 8  # our assumption
MEMORY_MB = 2_400_000  # 2.4 TB per node (§6.1)
# AOE's per-action overhead (cpuset update + exec): our assumption, in line with Table 1 (§6.4),
# where system overhead is a few percent of execution.
AOE_OVERHEAD_S = 0.02
DEPTH = 2  # §6.1 "other setup": depth 2
FIXED_DOPS = (4, 8, 16, 32)  # §6.4 compares DoP 4 and 16; 8 and 32 complete the range 1-32


def cpu_scheduler(
    nodes_count: int, cores: int, algorithm: str, fixed_dop: int = 4, rest_model: str = "efficient"
) -> ElasticScheduler:
    """The production scheduler on the pool; every other policy field keeps its default.
    ``rest_model`` "minimum" is the paper's Alg. 2 estimate, kept beside the default."""
    nodes = [
        CpuNodeSpec.uniform(f"cpu-{i}", cores, NUMA_PER_NODE, MEMORY_MB) for i in range(nodes_count)
    ]
    return ElasticScheduler(
        CpuTopology(nodes),
        depth=DEPTH,
        algorithm=algorithm,
        fixed_dop=fixed_dop,
        rest_model=rest_model,
    )


def run_tangram(
    trace: Trace,
    nodes_count: int,
    cores: int,
    algorithm: str,
    fixed_dop: int = 4,
    rest_model: str = "efficient",
) -> SimResult:
    """One pass of the trace through the production scheduler under one policy."""
    scheduler = cpu_scheduler(nodes_count, cores, algorithm, fixed_dop, rest_model)
    simulation = TangramSimulation(trace, {"cpu": scheduler}, overhead_s={"cpu": AOE_OVERHEAD_S})
    return simulation.run()


def scaled_to(params: PodParams, nodes: int) -> PodParams:
    """The control plane serves the whole cluster: a run on fewer nodes gets its share."""
    share = nodes / FULL_NODES
    return dataclasses.replace(
        params,
        pods_per_second=params.pods_per_second * share,
        pods_burst=max(1, round(params.pods_burst * share)),
    )
