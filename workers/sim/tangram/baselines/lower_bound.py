"""The lower bound: every action alone at its best DoP, no queueing."""

from __future__ import annotations

from collections.abc import Mapping

from workers.sim.tangram.results import ActionRecord, SimResult
from workers.sim.tangram.runner import pool_for
from workers.sim.tangram.trace import Trace


def lower_bound(trace: Trace, max_units: Mapping[str, int]) -> SimResult:
    """Every action alone on an idle pool at its best feasible DoP, no queueing, no restore.

    ``max_units`` caps the key resource per pool (cores per node, GPUs per node)."""
    result = SimResult(name="lower_bound")
    for trajectory in trace.trajectories:
        for index, step in enumerate(trajectory.steps):
            template = step.action
            if template is None:
                continue
            best = template.t1
            key = template.key_resource
            if key is not None and template.elasticity is not None:
                cap = max_units.get(pool_for(template), 1 << 30)
                options = [u for u in template.resources[key].options() if u <= cap] or [1]
                best = min(template.true_duration(u) for u in options)
            record = ActionRecord(
                f"{trajectory.trajectory_id}/{index}", trajectory.trajectory_id, template.kind, 0.0
            )
            record.started, record.finished = 0.0, best
            result.records.append(record)
    return result
