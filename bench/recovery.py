"""Scheduler recovery: time from a scheduler restart to its first dispatch, 10 000 actions queued.

Target: scheduler recovery ≤ 5 s with 10 000 queued actions.

Setup: a throwaway PostgreSQL database (migrated), one CPU pool whose 64-core node (two NUMA
nodes) registered through the scheduler store as an agent would, and ``ACTIONS`` actions submitted
through the actions service in batches (``action_submit_batch``, as the API does) and left queued.
Then, ``RESTARTS`` times: start ``manage.py run_scheduler`` as a fresh process over Redis and
measure wall time from the spawn until the first Dispatch entry appears on the node's dispatch
stream (a blocking XREAD in this process), then stop it. Each restart therefore also restores the
actions earlier runs scheduled (re-dispatched with the same attempt), as a real restart would.

Also measured in the same run, inside one warm Django process: ``rebuild()`` of a
``SchedulerService`` on the in-process transport until its first dispatch — the part of the
restart that is Loom's own work, without interpreter and Django start-up.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._execution import (
    Children,
    Unavailable,
    django_env,
    redis_prefix,
    redis_url,
    run_child,
    scheduler_argv,
    throwaway_database,
)
from bench.report import BenchReport, Target

POOL = "cpu"
NODE = "recovery-node"
NODE_CORES = 64
TARGET_S = 5.0


def seed(actions: int) -> dict[str, float]:
    """(Django child) Migrate, register the node, submit ``actions`` queued actions."""
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from apps.actions.scheduler_store import DjangoActionStore
    from apps.actions.services import ActionSpec, action_submit_batch
    from apps.core.demand import parse_demand
    from apps.jobs.models import Job
    from apps.resources.models import PoolKind, ResourcePool
    from workers.transport import NodeRegister

    call_command("migrate", verbosity=0, interactive=False)
    pool = ResourcePool.objects.create(name=POOL, kind=PoolKind.CPU)
    half = NODE_CORES // 2
    DjangoActionStore().upsert_node(
        NodeRegister(
            node_id=NODE,
            pool=POOL,
            agent_id=f"{NODE}:bench",
            kind="cpu",
            backend="local",
            cores=tuple(range(NODE_CORES)),
            numa={0: tuple(range(half)), 1: tuple(range(half, NODE_CORES))},
            memory_mb=256_000,
        )
    )
    job = Job.objects.create(name="recovery", owner=User.objects.create_user("bench"))
    spec = ActionSpec(demand=parse_demand({"cpu": 1}), pool_id=pool.pk, command="true")
    started = time.perf_counter()
    for start in range(0, actions, 1000):
        action_submit_batch(job=job, specs=[spec] * min(1000, actions - start))
    return {"submit_s": time.perf_counter() - started}


def rebuild_in_process() -> dict[str, float]:
    """(Django child) A warm process: rebuild() until the first dispatch is published."""
    from apps.actions.scheduler_store import DjangoActionStore
    from workers.scheduler import SchedulerService, ServiceConfig
    from workers.transport import InProcessTransport

    class Timed(InProcessTransport):
        first: float | None = None

        async def publish_many(self, stream: str, messages: Any) -> list[str]:
            if self.first is None and ":dispatch:" in stream and messages:
                self.first = time.perf_counter()
            return await super().publish_many(stream, messages)

    async def measure() -> dict[str, float]:
        transport = Timed()
        service = SchedulerService(
            config=ServiceConfig(pool=POOL, instance="bench-warm"),
            transport=transport,
            store=DjangoActionStore(),
        )
        started = time.perf_counter()
        await service.rebuild()
        done = time.perf_counter()
        assert transport.first is not None, "rebuild dispatched nothing"
        assert service.scheduler is not None
        return {
            "rebuild_to_first_dispatch_s": transport.first - started,
            "rebuild_total_s": done - started,
            "restored_running": float(service.scheduler.running_count),
            "waiting": float(service.scheduler.waiting_count),
        }

    return asyncio.run(measure())


def _first_dispatch_after_spawn(children: Children, env: dict[str, str], prefix: str) -> float:
    import redis

    client = redis.Redis.from_url(redis_url())
    stream = f"{prefix}:dispatch:{NODE}"
    last: list[Any] = client.xrevrange(stream, count=1)  # type: ignore[assignment]
    after: bytes = last[0][0] if last else b"0-0"
    started = time.perf_counter()
    process = children.spawn("scheduler", scheduler_argv(POOL, prefix), env)
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"scheduler exited:\n{children.log_tail('scheduler')}")
            if client.xread({stream: after}, count=1, block=200):
                return time.perf_counter() - started
            if time.perf_counter() - started > 120:
                raise TimeoutError("no dispatch within 120 s")
    finally:
        children.stop("scheduler")
        client.close()


def measure(actions: int, restarts: int) -> dict[str, Any]:
    """The whole measurement (used by ``run`` and, at a tiny size, by the test)."""
    with (
        throwaway_database("recovery") as database,
        redis_prefix("recovery") as prefix,
        tempfile.TemporaryDirectory(prefix="loom-recovery-") as logs,
    ):
        quiet = django_env(database, prefix=prefix)  # seeding announces nothing
        seeded = run_child("bench.recovery.seed", quiet, actions)
        env = django_env(database, redis=redis_url(), prefix=prefix)
        children = Children(Path(logs))
        try:
            restart_s = [
                _first_dispatch_after_spawn(children, env, prefix) for _ in range(restarts)
            ]
        finally:
            children.stop_all()
        warm = run_child("bench.recovery.rebuild_in_process", quiet)
    return {"seed": seeded, "restart_s": restart_s, "warm": warm}


def run(quick: bool) -> BenchReport:
    actions = 10_000
    restarts = 1 if quick else 3
    report = BenchReport(
        benchmark="recovery",
        quick=quick,
        params={
            "queued_actions": actions,
            "restarts": restarts,
            "node_cores": NODE_CORES,
            "transport": "redis streams (scheduler process) / in-process (warm rebuild)",
            "database": "throwaway PostgreSQL",
        },
    )
    try:
        result = measure(actions, restarts)
    except Unavailable as exc:
        return report.skip(exc)
    worst = max(result["restart_s"])
    report.series = {
        "restart_to_first_dispatch_s": result["restart_s"],
        "submit_10k_s": result["seed"]["submit_s"],
        "warm_rebuild": result["warm"],
    }
    report.targets.append(Target.at_most("restart_to_first_dispatch_s_worst", worst, TARGET_S))
    return report
