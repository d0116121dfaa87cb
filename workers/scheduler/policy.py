"""Applying a stored policy to a live scheduler: all of it, or none of it (arl-tangram §4.2).

The service calls :func:`policy_apply` when the pool's policy moves to a new version. A policy
it cannot apply is refused with the reason, and the scheduler keeps the one it runs: a single
bad edit must never stop a pool.
"""

from __future__ import annotations

from typing import Any

from workers.algorithms.tangram import BasicLimit, BasicTopology, ElasticScheduler
from workers.algorithms.tangram.policy import (
    SCHEDULER_FIELDS,
    policy_check,
    policy_problems_text,
)


def policy_apply(scheduler: ElasticScheduler, settings: Any) -> str | None:
    """Apply a whole policy (absent fields take their defaults); else the reason, unchanged.

    The same check as every edge that writes a policy, without the pool's size: the scheduler
    bounds DoP by its live topology itself, so a pool that shrank after an edit degrades to
    those bounds rather than to a refusal.
    """
    clean, problems = policy_check(settings)
    if problems:
        return policy_problems_text(problems)
    previous = scheduler.policy()
    topology = scheduler.topology
    limits = dict(topology.limits) if isinstance(topology, BasicTopology) else {}
    try:
        scheduler.set_policy(**{name: clean[name] for name in SCHEDULER_FIELDS})
        api_quotas_apply(scheduler, clean["quotas"])
    except (ValueError, TypeError) as exc:
        scheduler.set_policy(**previous)
        if isinstance(topology, BasicTopology):
            for name, limit in limits.items():
                topology.set_limit(name, limit)
        return str(exc)
    return None


def api_quotas_apply(scheduler: ElasticScheduler, quotas: dict[str, Any]) -> None:
    """An API pool's policy may override its APIs' limits (arl-tangram §5.1), live."""
    topology = scheduler.topology
    if not isinstance(topology, BasicTopology):
        return
    for name, limits in quotas.items():
        topology.set_limit(
            name,
            BasicLimit(
                concurrency=limits.get("concurrency"),
                quota=limits.get("quota"),
                period_s=float(limits.get("period_s", 60.0)),
            ),
        )
