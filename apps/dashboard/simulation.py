"""Launch page: replay a generated or recorded trace through the Tangram simulator under one or
two policies and compare their ACT (DESIGN.md "The simulator": it ships as a product feature).

``simulation_start`` validates and records a :class:`SimulationRun`, then enqueues the Celery task
after commit; the task calls ``simulation_execute``, which drives the simulator in
``workers/sim/tangram`` (the same scheduler classes production uses) once per policy.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.utils import timezone

from apps.dashboard.models import SimulationRun
from apps.dashboard.policy_fields import policy_validate
from apps.dashboard.roles import user_can_operate
from apps.dashboard.services import DashboardForbidden, DashboardInputError
from apps.metrics.stats import act_stats

logger = logging.getLogger(__name__)

MAX_TRAJECTORIES = 2_000
MAX_CORES = 1024
MAX_RECORDED_ACTIONS = 20_000
CDF_POINTS = 60


def _validate_trace(trace: Any) -> tuple[dict[str, Any], list[dict[str, str]]]:
    if not isinstance(trace, dict):
        return {}, [{"field": "trace", "reason": "must be an object"}]
    kind = trace.get("kind")
    errors: list[dict[str, str]] = []
    cores = trace.get("cores_per_node", 32)
    if isinstance(cores, bool) or not isinstance(cores, int) or not 1 <= cores <= MAX_CORES:
        errors.append({"field": "trace.cores_per_node", "reason": f"must be 1..{MAX_CORES}"})
    if kind == "generated":
        count, rate, seed = trace.get("count"), trace.get("rate"), trace.get("seed", 0)
        if not isinstance(count, int) or not 1 <= count <= MAX_TRAJECTORIES:
            errors.append({"field": "trace.count", "reason": f"must be 1..{MAX_TRAJECTORIES}"})
        if not isinstance(rate, int | float) or not 0 < rate <= 100_000:
            errors.append({"field": "trace.rate", "reason": "must be a rate in (0, 100000] /s"})
        if not isinstance(seed, int):
            errors.append({"field": "trace.seed", "reason": "must be an integer"})
        spec = {"kind": kind, "count": count, "rate": rate, "seed": seed}
        return {**spec, "cores_per_node": cores}, errors
    if kind == "recorded":
        from apps.jobs.models import Job

        job = trace.get("job")
        if not isinstance(job, int) or not Job.objects.filter(pk=job).exists():
            errors.append({"field": "trace.job", "reason": "must be the id of an existing job"})
        return {"kind": kind, "job": job, "cores_per_node": cores}, errors
    return {}, [{"field": "trace.kind", "reason": "must be 'generated' or 'recorded'"}]


def simulation_start(
    *, user: AbstractBaseUser | AnonymousUser, trace: Any, policies: list[Any]
) -> SimulationRun:
    """Validate, record and enqueue one comparison."""
    if not user_can_operate(user):
        raise DashboardForbidden("forbidden: read-only operators cannot launch simulations")
    clean_trace, errors = _validate_trace(trace)
    clean_policies = []
    for index, policy in enumerate(policies):
        clean, policy_errors = policy_validate(policy)
        errors += [
            {
                "field": f"policies[{index}].{e['field'].removeprefix('settings.')}",
                "reason": e["reason"],
            }
            for e in policy_errors
        ]
        clean_policies.append(clean)
    if errors:
        raise DashboardInputError(errors)
    from apps.dashboard.tasks import dashboard_simulate

    with transaction.atomic():
        run = SimulationRun.objects.create(
            created_by=user if isinstance(user, User) else None,
            params={"trace": clean_trace, "policies": clean_policies},
        )
        transaction.on_commit(lambda: dashboard_simulate.delay(run.pk))
    return run


def cdf(values: list[float], points: int = CDF_POINTS) -> list[tuple[float, float]]:
    """Empirical CDF sampled at ``points`` quantiles: ``[(act_s, fraction ≤ act_s)]``."""
    if not values:
        return []
    ordered = np.sort(np.asarray(values, dtype=float))
    fractions = np.linspace(0.0, 1.0, points + 1)[1:]
    indices = np.minimum((fractions * len(ordered)).astype(int), len(ordered) - 1)
    return [(float(ordered[i]), float(f)) for i, f in zip(indices, fractions, strict=True)]


def simulation_execute(*, run_id: int) -> None:
    """Run every policy of a SimulationRun through the simulator and store the comparison."""
    from apps.dashboard import simulator_bridge

    claimed = SimulationRun.objects.filter(pk=run_id, status=SimulationRun.Status.PENDING).update(
        status=SimulationRun.Status.RUNNING
    )
    if claimed != 1:
        return
    run = SimulationRun.objects.get(pk=run_id)
    try:
        trace = simulator_bridge.build_trace(run.params["trace"])
        results = []
        for index, policy in enumerate(run.params["policies"]):
            cores = int(run.params["trace"].get("cores_per_node", 32))
            outcome = simulator_bridge.replay(trace, policy, cores_per_node=cores)
            results.append(
                {
                    "label": f"{'AB'[index]}: {policy['algorithm']} (depth {policy['depth']})",
                    "settings": policy,
                    "act": act_stats(outcome.acts_s),
                    "act_cdf": cdf(outcome.acts_s),
                    "makespan_s": outcome.makespan_s,
                }
            )
    except Exception as error:  # the run records why; the operator sees it on the page
        logger.exception("simulation %s failed", run_id)
        SimulationRun.objects.filter(pk=run_id).update(
            status=SimulationRun.Status.FAILED,
            error=f"{type(error).__name__}: {error}",
            finished_at=timezone.now(),
        )
        return
    SimulationRun.objects.filter(pk=run_id).update(
        status=SimulationRun.Status.SUCCEEDED,
        result={"policies": results},
        finished_at=timezone.now(),
    )
