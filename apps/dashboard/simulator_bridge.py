"""The Launch page's bridge to the Tangram simulator (workers/sim/tangram): builds a trace from
the page's request and replays it under one policy with the production ``ElasticScheduler``.

Generated traces are the simulator's AI-coding workload (arl-tangram §6.1: LLM turns, short
environment actions, a long-tailed elastic reward), with trajectories spread over
``count / rate`` seconds. Recorded traces turn a job's finished CPU actions into one-action
trajectories that arrive when the originals were submitted, with the originals' execution time
as single-unit duration (scaled by the units they held when they had an elasticity profile).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler, ResourceDemand
from workers.sim.tangram.runner import TangramSimulation
from workers.sim.tangram.trace import ActionTemplate, Step, Trace, TrajectoryTrace
from workers.sim.tangram.workloads import AiCodingParams, ai_coding_trace

NUMA_PER_NODE = 2
NODE_MEMORY_MB = 1 << 22
# Per-action system overhead (allocate-on-execution: cpuset update + exec), arl-tangram Table 1.
AOE_OVERHEAD_S = 0.02


@dataclass(frozen=True)
class ReplayOutcome:
    acts_s: list[float]
    makespan_s: float


def _recorded_trace(job_id: int) -> Trace:
    from apps.actions.models import Action, ActionStatus
    from apps.dashboard.simulation import MAX_RECORDED_ACTIONS

    rows = list(
        Action.objects.filter(
            job_id=job_id, status=ActionStatus.SUCCEEDED, started_at__isnull=False
        )
        .order_by("submitted_at")
        .values(
            "id",
            "submitted_at",
            "started_at",
            "finished_at",
            "key_resource",
            "min_units",
            "max_units",
            "elasticity",
            "allocation",
            "single_unit_duration_s",
        )[:MAX_RECORDED_ACTIONS]
    )
    rows = [r for r in rows if r["key_resource"] == "cpu"]
    if not rows:
        raise ValueError(f"job {job_id} has no finished CPU actions to replay")
    origin = rows[0]["submitted_at"]
    trajectories = []
    for row in rows:
        held = len((row["allocation"] or {}).get("cores", [])) or 1
        started, finished = row["started_at"], row["finished_at"]
        if started is None or finished is None:
            continue
        executed = (finished - started).total_seconds()
        elasticity = row["elasticity"]
        efficiency = list(elasticity["efficiency"]) if elasticity else []
        if row["single_unit_duration_s"]:
            t1 = float(row["single_unit_duration_s"])
        elif efficiency:
            t1 = executed * held * efficiency[min(held, len(efficiency)) - 1]
        else:
            t1 = executed
        template = ActionTemplate(
            tool="recorded",
            kind="recorded",
            t1=max(t1, 1e-3),
            resources={"cpu": ResourceDemand.between(row["min_units"], row["max_units"])},
            profiled=bool(row["single_unit_duration_s"]),
            key_resource="cpu" if efficiency else None,
            elasticity={"points": {i + 1: e for i, e in enumerate(efficiency)}}
            if efficiency
            else None,
        )
        trajectories.append(
            TrajectoryTrace(
                trajectory_id=f"action-{row['id']}",
                task="recorded",
                start=(row["submitted_at"] - origin).total_seconds(),
                steps=(Step(action=template),),
            )
        )
    return Trace(name=f"job-{job_id}", trajectories=trajectories, params={"job": job_id})


def build_trace(spec: dict[str, Any]) -> Trace:
    """The trace a SimulationRun's validated ``trace`` spec describes."""
    if spec["kind"] == "recorded":
        return _recorded_trace(int(spec["job"]))
    count = int(spec["count"])
    params = AiCodingParams(start_jitter_s=count / float(spec["rate"]))
    return ai_coding_trace(count, seed=int(spec.get("seed", 0)), params=params)


def replay(
    trace: Trace, policy: dict[str, Any], *, nodes: int = 1, cores_per_node: int = 32
) -> ReplayOutcome:
    """Run ``trace`` through a fresh scheduler configured with ``policy``."""
    topology = CpuTopology(
        [
            CpuNodeSpec.uniform(f"sim-{i}", cores_per_node, NUMA_PER_NODE, NODE_MEMORY_MB)
            for i in range(nodes)
        ]
    )
    scheduler = ElasticScheduler(
        topology,
        depth=int(policy["depth"]),
        algorithm=str(policy["algorithm"]),
        min_dop=int(policy["min_dop"]),
        max_dop=int(policy["max_dop"]),
        fixed_dop=int(policy["fixed_dop"]),
    )
    result = TangramSimulation(trace, {"cpu": scheduler}, overhead_s={"cpu": AOE_OVERHEAD_S}).run()
    return ReplayOutcome(acts_s=result.acts(), makespan_s=result.makespan)
