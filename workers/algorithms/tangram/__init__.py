"""ARL-Tangram action scheduling core (arl-tangram §4–§5, App. A–B). Pure: time is passed in.

Public API (what the scheduler service, the simulator and the benchmarks import)::

    from workers.algorithms.tangram import (
        ActionSpec, ResourceDemand, Elasticity, ElasticScheduler,
        CpuTopology, CpuNodeSpec, GpuTopology, GpuServiceSpec, BasicTopology, BasicLimit,
    )

    pool = CpuTopology([CpuNodeSpec.uniform("node-0", cores=256, numa_nodes=8, memory_mb=2**20)])
    scheduler = ElasticScheduler(pool, depth=2)            # algorithm="elastic" by default
    scheduler.submit(ActionSpec(
        action_id="a1", tool="pytest", trajectory_id="t1",
        resources={"cpu": ResourceDemand.between(1, 32), "memory_mb": ResourceDemand.exactly(4096)},
        key_resource="cpu", elasticity=Elasticity.amdahl(0.95, 32), t1=60.0,
    ), now=0.0)
    for a in scheduler.schedule(now=0.0):   # list[Assignment]
        a.action_id, a.node, a.core_ids, a.gpu_ids, a.quota_units, a.dop, a.expected_seconds
    scheduler.complete("a1", now=12.3)      # -> CompletedAction (ACT = finished - submitted)
    scheduler.cancel("a2")                  # waiting or running; False if unknown
    scheduler.end_trajectory("t1", now)     # releases the trajectory's reserved memory (CPU)

Call ``schedule(now)`` after every arrival and completion (and at ``next_wakeup(now)`` when a
quota period rolls over). Policies change live with ``set_policy(algorithm=...,
depth=..., min_dop=..., max_dop=..., fixed_dop=..., estimate_window=...)``, the algorithm being
"elastic" (Alg. 1), "fcfs-min" or "fixed-dop".
Introspection for the dashboard: ``waiting_count``, ``running_count``, ``running()``,
``holdings()`` (per node: free/used units and who holds them), ``wait_reason(action_id)`` and
``head_wait_reason()`` ("no cores free", "quota exhausted", "service loading", ...),
``snapshot()``.

Modules: ``action`` (formulation, Eq. 1), ``history`` (running averages), ``dparrange``
(Alg. 3 with the basic and GPU-chunk operators, Alg. 4), ``objective`` (Alg. 2), ``scheduler``
(Alg. 1: admission, the queue, starting actions), ``sizing`` (the units an action may get under the
live policy), ``eviction`` (Alg. 1 lines 5–12: the elastic split, cost and tail eviction),
``entries`` (the scheduler's records), ``policy`` (policy validation), ``topology`` (basic §5.1,
CPU §5.2, GPU §5.3 behind one interface).
"""

from workers.algorithms.tangram.action import ActionSpec, Elasticity, ResourceDemand
from workers.algorithms.tangram.dparrange import (
    BasicDPOperator,
    GpuChunkDPOperator,
    chunk_take,
    dp_arrange,
)
from workers.algorithms.tangram.history import DurationHistory
from workers.algorithms.tangram.objective import approximated_objective, estimate_remaining
from workers.algorithms.tangram.scheduler import (
    ALGORITHMS,
    Assignment,
    CompletedAction,
    ElasticScheduler,
)
from workers.algorithms.tangram.topology import (
    Allocation,
    BasicLimit,
    BasicTopology,
    CpuNodeSpec,
    CpuTopology,
    GpuServiceSpec,
    GpuTopology,
    Topology,
    WaitReason,
)

__all__ = [
    "ALGORITHMS",
    "ActionSpec",
    "Allocation",
    "Assignment",
    "BasicDPOperator",
    "BasicLimit",
    "BasicTopology",
    "CompletedAction",
    "CpuNodeSpec",
    "CpuTopology",
    "DurationHistory",
    "ElasticScheduler",
    "Elasticity",
    "GpuChunkDPOperator",
    "GpuServiceSpec",
    "GpuTopology",
    "ResourceDemand",
    "Topology",
    "WaitReason",
    "approximated_objective",
    "chunk_take",
    "dp_arrange",
    "estimate_remaining",
]
