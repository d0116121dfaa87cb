"""Data the GPU map, buffer and Rollouts tests share (API tests and the browser tests): written
through the system's own write paths where it has one (a GPU agent's registration through the
scheduler store), through factories otherwise."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from django.utils import timezone

from apps.actions.models import ActionStatus
from workers.transport.messages import NodeRegister

GPU_SERVICES: dict[str, dict[str, Any]] = {
    "reward": {"kind": "torch", "sizes": [1, 2], "device_mb": [500.0, 500.0]},
    "teacher": {"kind": "torch", "sizes": [1], "device_mb": [900.0]},
    "judge": {"kind": "torch", "error": "weights missing"},
}


def gpu_register(cache: list[dict[str, Any]]) -> NodeRegister:
    """What a 4-GPU agent registers (``workers.agents.gpu.agent.GpuAgent.registration``)."""
    return NodeRegister(
        node_id="gpu-a",
        pool="gpu",
        agent_id="gpu-agent-a",
        kind="gpu",
        backend="torch",
        cores=tuple(range(8)),
        numa={0: tuple(range(8))},
        memory_mb=8192,
        gpus=(0, 1, 2, 3),
        gpu_memory_mb=16_000,
        nvlink_groups=((0, 1, 2, 3),),
        services=GPU_SERVICES,
        cache=tuple(cache),
    )


def gpu_cache_store(cache: list[dict[str, Any]]) -> Any:
    """Store a registration with this cache through the scheduler's own write path (what a GPU
    agent's registration or a heartbeat whose cache changed leads to); the node row back."""
    from apps.actions.scheduler_store import DjangoActionStore
    from apps.resources.models import Node

    DjangoActionStore().upsert_node(gpu_register(cache))
    return Node.objects.get(name="gpu-a")


def gpu_cluster() -> dict[str, Any]:
    """A 4-GPU node: ``reward`` resident on GPUs 0–1, ``teacher`` resident on GPU 2, ``judge``
    did not load; the three services registered in the pool ``gpu``."""
    from tests.factories import JobFactory, PoolFactory, ServiceFactory

    pool: Any = PoolFactory(name="gpu", kind="gpu")
    now = time.time()
    node = gpu_cache_store(
        [
            {"service": "teacher", "start": 2, "size": 1, "last_used": now - 30},
            {"service": "reward", "start": 0, "size": 2, "last_used": now - 5},
        ]
    )
    services = {
        name: ServiceFactory(name=name, pool=pool, allowed_dop=[1, 2])
        for name in ("reward", "teacher", "judge")
    }
    return {"pool": pool, "node": node, "services": services, "job": JobFactory(name="rl")}


def gpu_action(cluster: dict[str, Any], service: str, status: str, **fields: Any) -> Any:
    from tests.factories import ActionFactory

    return ActionFactory(
        job=cluster["job"],
        pool=cluster["pool"],
        service=cluster["services"][service],
        demand={"gpu": {"min": 1, "max": 2}},
        key_resource="gpu",
        status=status,
        **fields,
    )


def allocated(cluster: dict[str, Any], service: str, gpus: list[int]) -> Any:
    now = timezone.now()
    return gpu_action(
        cluster,
        service,
        ActionStatus.RUNNING,
        node=cluster["node"],
        allocation={"gpus": gpus, "units": len(gpus)},
        scheduled_at=now - timedelta(seconds=1),
        started_at=now - timedelta(seconds=1),
    )


def finished(cluster: dict[str, Any], service: str, act_s: float, **fields: Any) -> Any:
    end = timezone.now()
    return gpu_action(
        cluster,
        service,
        ActionStatus.SUCCEEDED,
        submitted_at=end - timedelta(seconds=act_s),
        scheduled_at=end - timedelta(seconds=act_s / 2),
        started_at=end - timedelta(seconds=act_s / 2),
        finished_at=end,
        **fields,
    )


def buffer_with_history(job: Any) -> Any:
    from apps.buffers.models import BufferSnapshot
    from tests.factories import BufferFactory, TriggerFactory

    buffer: Any = BufferFactory(
        job=job, name="rollout", capacity=100, schema={"obs": {"shape": [4], "dtype": "float32"}}
    )
    TriggerFactory(buffer=buffer, name="batch", kind="data_key", params={"n": 8, "size": 32})
    TriggerFactory(buffer=buffer, name="tick", kind="time", params={"period_s": 5})
    start = timezone.now() - timedelta(minutes=2)
    for i in range(4):
        BufferSnapshot.objects.create(
            buffer=buffer,
            taken_at=start + timedelta(seconds=30 * i),
            held=20 * i,
            complete=20 * i,
            actors=2,
            steps_written=25 * i,
            samples=10 * i,
            firings={"batch": 3 * i, "tick": i},
        )
    buffer_actors(buffer)
    return buffer


def buffer_actors(buffer: Any) -> None:
    """Two elastic actors of a PPO workflow: one pre-warmed, one running."""
    from apps.buffers.models import BufferActorState

    reported = timezone.now() - timedelta(seconds=10)
    # actor, state, invocations, restored, last start-up wait, its p50 and p99
    for actor, state, runs, restored, wait, p50, p99 in (
        ("actor0", "prewarmed", 12, 11, 0.0, 0.0, 0.21),
        ("actor1", "running", 3, 2, 0.012, 0.012, 0.3),
    ):
        BufferActorState.objects.create(
            buffer=buffer,
            workflow="ppo",
            actor=actor,
            state=state,
            invocations=runs,
            restored=restored,
            cold=1,
            last_startup_wait_s=wait,
            last_restore_s=0.004,
            startup_wait_p50_s=p50,
            startup_wait_p99_s=p99,
            reported_at=reported,
        )


def rollout(job: Any) -> dict[str, Any]:
    """Two workers, trajectories in each state, one DARTS group with a pruned sample."""
    from tests.factories import TrajectoryFactory

    def make(**fields: Any) -> Any:
        return TrajectoryFactory(job=job, training_step=3, **fields)

    return {
        "long": make(status="generating", llm_worker="w0", tokens=100,
                     predicted_remaining_tokens=900, group_id="g1", sample_index=0),
        "short": make(status="tool_call", llm_worker="w0", tokens=50,
                      predicted_remaining_tokens=100, group_id="g1", sample_index=1),
        "other": make(status="generating", llm_worker="w1", tokens=10,
                      predicted_remaining_tokens=400),
        "waiting": make(status="pending"),
        "kept": make(status="finished", llm_worker="w1", tokens=300, group_id="g1",
                     sample_index=2),
        "pruned": make(status="aborted", llm_worker="w1", tokens=20, group_id="g1",
                       sample_index=3),
    }  # fmt: skip
