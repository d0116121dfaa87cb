"""Applying a stored policy to a live scheduler: all of it, or none of it (arl-tangram §4.2).

The service calls :func:`policy_apply` (through :class:`PolicyTracker`) when the pool's policy
moves to a new version. A policy it cannot apply is refused with the reason, and the scheduler
keeps the one it runs: a single bad edit must never stop a pool.
"""

from __future__ import annotations

import logging
from typing import Any

from workers.algorithms.tangram import BasicLimit, BasicTopology, ElasticScheduler
from workers.algorithms.tangram.policy import (
    SCHEDULER_FIELDS,
    policy_check,
    policy_problems_text,
)

log = logging.getLogger("loom.scheduler")


class PolicyTracker:
    """The policy version a pool's scheduler runs, and the last version it refused (with why)."""

    def __init__(self, pool: str) -> None:
        self.pool = pool
        self.version: int | None = None
        # The last version refused: the scheduler keeps running the one before (never a crash),
        # and the dashboard shows why until a later version applies.
        self.rejected: dict[str, Any] | None = None
        self._seen: int | None = None

    def forget(self) -> None:
        """A rebuilt scheduler runs its defaults until the stored policy is applied again."""
        self.version = None
        self._seen = None

    def update(self, scheduler: ElasticScheduler, loaded: tuple[int, Any] | None) -> None:
        """Apply the stored ``(version, settings)`` if it is a version not seen yet."""
        if loaded is None or loaded[0] == self._seen:
            return
        version, settings = loaded
        self._seen = version
        reason = policy_apply(scheduler, settings)
        if reason is not None:
            self.rejected = {"version": version, "reason": reason}
            log.error("pool %s: policy v%s rejected, still running v%s: %s",
                      self.pool, version, self.version, reason)  # fmt: skip
            return
        self.version = version
        self.rejected = None
        log.info("pool %s now runs policy v%s: %s", self.pool, version, settings)


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
