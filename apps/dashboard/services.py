"""Writes an operator makes from the dashboard (REST views and websocket commands both call these).

Each checks the operator role first (the views check too: defence in depth), then calls the
owning app's service, then publishes the fresh state so every open dashboard sees it at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import transaction

from apps.actions.demand import parse_demand
from apps.actions.models import Action
from apps.actions.services import ActionSpec, action_cancel, action_submit_batch
from apps.dashboard.policy_fields import policy_validate
from apps.dashboard.publish import publish
from apps.dashboard.roles import user_can_operate
from apps.dashboard.selectors import pool_policy
from apps.dashboard.snapshots import job_snapshot, node_view, pool_snapshot
from apps.jobs.models import Job
from apps.policies.models import Policy, PolicyKind
from apps.policies.services import PolicyInvalid, policy_create, policy_update
from apps.resources.models import Node, NodeStatus, PoolKind, ResourcePool

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


def _publish_after_commit(topic: str, payload_factory: Any) -> None:
    transaction.on_commit(lambda: publish(topic, payload_factory()))


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
    """Create the pool's policy or add a version to it; publish the pool once committed."""
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
        _publish_after_commit(f"pool:{pool.name}", lambda: pool_snapshot(pool))
    return policy


def dashboard_action_cancel(*, user: User, action: Action) -> bool:
    """Cancel one action; False when it had already ended."""
    _require_operator(user, "cancel an action")
    with transaction.atomic():
        cancelled = action_cancel(
            action_id=action.pk, reason=f"cancelled by {user.get_username()} from the dashboard"
        )
        if cancelled:
            job = action.job
            _publish_after_commit(f"job:{job.pk}", lambda: job_snapshot(job))
    return cancelled


def dashboard_node_set_draining(*, user: User, node: Node, draining: bool) -> Node:
    """Drain (no new allocations; running actions finish) or resume a node.

    A conditional update: an offline node cannot be drained or resumed from here, and two
    operators clicking at once leave it in one well-defined state.
    """
    _require_operator(user, "drain or resume a node")
    source = NodeStatus.ONLINE if draining else NodeStatus.DRAINING
    target = NodeStatus.DRAINING if draining else NodeStatus.ONLINE
    with transaction.atomic():
        changed = Node.objects.filter(pk=node.pk, status__in=[source, target]).update(status=target)
        if changed != 1:
            raise DashboardInputError(
                [{"field": "node", "reason": f"node is {node.status}; only online nodes drain"}]
            )
        node.refresh_from_db()
        _publish_after_commit(f"node:{node.pk}", lambda: node_view(node))
    return node


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
        _publish_after_commit(f"pool:{pool.name}", lambda: pool_snapshot(pool))
        _publish_after_commit(f"job:{job.pk}", lambda: job_snapshot(job))
    return job, sum(1 for s in submitted if s.created)
