"""Writes an operator makes from the dashboard (REST views and websocket commands both call these).

Each checks the operator role first (the views check too: defence in depth), then calls the
owning app's service. That service announces the change once committed (``apps.core.live``) and
the dashboard's receiver (``live.receivers``) publishes the fresh state, so every open dashboard
sees it at once, whichever edge made the change.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from apps.actions.models import Action
from apps.actions.services import ActionSpec, action_cancel, action_submit_batch
from apps.core.demand import parse_demand
from apps.core.live import Change, changed_on_commit
from apps.dashboard.policy_fields import policy_validate
from apps.dashboard.roles import user_can_operate
from apps.dashboard.selectors import pool_policy
from apps.jobs.models import Job
from apps.policies.models import Policy, PolicyKind
from apps.policies.services import PolicyInvalid, policy_create, policy_update
from apps.resources.models import Node, PoolKind, ResourcePool
from apps.resources.services import NodeNotDrainable, node_set_draining

DEMO_JOB_NAME = "dashboard-demo"
MAX_DEMO_ACTIONS = 10_000

User = AbstractBaseUser | AnonymousUser


class DashboardForbidden(PermissionError):
    """The user lacks the admin role for a change."""


@dataclass
class DashboardInputError(ValueError):
    """Bad input; ``errors`` in Loom's shape ``[{"field", "reason"}]``."""

    errors: list[dict[str, str]]

    def __str__(self) -> str:
        return "; ".join(f"{e['field']}: {e['reason']}" for e in self.errors)


def _require_operator(user: User, what: str) -> None:
    if not user_can_operate(user):
        raise DashboardForbidden(f"forbidden: read-only operators cannot {what}")


def dashboard_policy_save(*, user: User, pool: ResourcePool, settings: Any) -> Policy:
    """Validate and store a new version of the pool's action-scheduler policy."""
    _require_operator(user, "change a policy")
    clean, errors = policy_validate(settings, pool=pool)
    if errors:
        raise DashboardInputError(errors)
    author = user if isinstance(user, AbstractBaseUser) else None
    try:
        return _policy_store(pool=pool, settings=clean, author=author)
    except PolicyInvalid as error:  # the pool changed between the check and the write
        raise DashboardInputError(error.errors) from None


def _policy_store(*, pool: ResourcePool, settings: dict[str, Any], author: Any) -> Policy:
    """Create the pool's policy or add a version to it (the policy service shows the pool)."""
    with transaction.atomic():
        policy = pool_policy(pool)
        if policy is None:
            policy = policy_create(
                name=f"{pool.name}-scheduler",
                kind=PolicyKind.ACTION_SCHEDULER,
                pool=pool,
                settings=settings,
                author=author,
                comment="created from the dashboard",
            )
        else:
            policy = policy_update(
                policy_id=policy.pk,
                settings=settings,
                author=author,
                comment="changed from the dashboard",
            )
    return policy


def dashboard_action_cancel(*, user: User, action: Action) -> bool:
    """Cancel one action; False when it had already ended."""
    _require_operator(user, "cancel an action")
    return action_cancel(
        action_id=action.pk, reason=f"cancelled by {user.get_username()} from the dashboard"
    )


def dashboard_node_set_draining(*, user: User, node: Node, draining: bool) -> Node:
    """Drain (no new allocations; running actions finish) or resume a node."""
    _require_operator(user, "drain or resume a node")
    try:
        return node_set_draining(node=node, draining=draining)
    except NodeNotDrainable as refusal:
        raise DashboardInputError([{"field": "node", "reason": str(refusal)}]) from None


def _demo_demand(pool: ResourcePool) -> tuple[dict[str, Any], dict[str, Any] | None, list[str]]:
    """Elastic cores: the demo runs shell commands, which only CPU pools execute (GPU pools have
    no scheduler service yet; API pools run HTTP calls, not commands)."""
    if pool.kind != PoolKind.CPU:
        raise DashboardInputError(
            [{"field": "pool", "reason": f"{pool.name} is a {pool.kind} pool; choose a CPU pool"}]
        )
    efficiency = [1.0, 0.95, 0.9, 0.85]
    return {"cpu": {"min": 1, "max": 4}}, {"resource": "cpu", "efficiency": efficiency}, []


def _elastic_sleep(single_unit_s: float) -> str:
    """A stand-in workload that honours its elasticity: it sleeps T(m) = T1 / (E(m)·m) for the
    m = {dop} cores it is granted (efficiency 1, .95, .9, .85 as declared by _demo_demand)."""
    return (
        "case {dop} in 1) s=1;; 2) s=1.9;; 3) s=2.7;; *) s=3.4;; esac; "
        f"sleep $(awk -v d={single_unit_s:.3f} -v s=$s 'BEGIN {{print d / s}}')"
    )


def dashboard_launch_demo(
    *, user: User, pool: ResourcePool, count: int, mean_duration_s: float, seed: int | None = None
) -> tuple[Job, int]:
    """Submit ``count`` demo actions (exponential single-unit durations) to the demo job."""
    _require_operator(user, "launch a workload")
    errors = []
    if not 1 <= count <= MAX_DEMO_ACTIONS:
        errors.append({"field": "count", "reason": f"must be between 1 and {MAX_DEMO_ACTIONS}"})
    if not 0.01 <= mean_duration_s <= 600:
        errors.append({"field": "duration_s", "reason": "must be between 0.01 and 600 seconds"})
    if errors:
        raise DashboardInputError(errors)
    raw_demand, elasticity, quotas = _demo_demand(pool)
    demand = parse_demand(raw_demand, elasticity, api_quotas=quotas)
    job, _ = Job.objects.get_or_create(
        name=DEMO_JOB_NAME,
        defaults={"owner": user, "description": "demo workload launched from the dashboard"},
    )
    rng = random.Random(seed)
    specs = []
    for _ in range(count):
        duration = max(0.01, rng.expovariate(1.0 / mean_duration_s))
        specs.append(
            ActionSpec(
                demand=demand,
                pool_id=pool.pk,
                command=_elastic_sleep(duration),
                single_unit_duration_s=duration,
                timeout_s=max(60.0, duration * 10),
            )
        )
    with transaction.atomic():
        submitted = action_submit_batch(job=job, specs=specs)
        # Submissions announce nothing themselves (``apps.core.live``); a launch shows at once.
        changed_on_commit([Change("pool", pool.name), Change("job", str(job.pk))])
    return job, sum(1 for s in submitted if s.created)
