"""Trajectories as the LLM router sees them: a Redis hash it reads (``workers.router.registry``).

The router has no database, like every process outside the web tier, so the control plane
keeps ``{prefix}:router:trajectories`` (trajectory id → job id) in step with the ``Trajectory``
rows: the router serves a trajectory only if it is here and belongs to the caller's job. A
trajectory is published once its creation commits and withdrawn once its end commits: an ended
trajectory generates nothing more. ``router_trajectories_sync`` (a periodic task) rebuilds the hash
from the rows, which also drops deleted trajectories (no delete signal: it would make Django
fetch every trajectory of a deleted job one by one). The other direction, the router's state
back into the rows, is ``router_state``.

In the embedded mode (no Redis) there is no router registry and these do nothing. A Redis that
refuses a write is logged, not raised: the database write stands and the sync repairs it.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from django.db import transaction

from apps.trajectories.models import TERMINAL_TRAJECTORY_STATUSES, Trajectory
from controlplane.redis_client import configured_redis, key_prefix
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.router_registry")


def _names() -> RegistryNames:
    return RegistryNames(key_prefix())


def _write(action: str, trajectory_id: int, job_id: int | None) -> None:
    client = configured_redis()
    if client is None:
        return
    try:
        if action == "publish":
            client.hset(_names().trajectories, str(trajectory_id), str(job_id))
        else:
            client.hdel(_names().trajectories, str(trajectory_id))
    except redis.RedisError:
        log.warning(
            "router trajectory registry: %s of %s failed; run router_trajectories_sync",
            action,
            trajectory_id,
        )


def router_trajectory_published(*, trajectory: Trajectory) -> None:
    """After the commit: the router serves this trajectory for its job."""
    if trajectory.status in TERMINAL_TRAJECTORY_STATUSES:
        return
    pk, job_id = trajectory.pk, trajectory.job_id
    transaction.on_commit(lambda: _write("publish", pk, job_id))


def router_trajectory_withdrawn(*, trajectory_id: int) -> None:
    """After the commit: the router refuses this trajectory (it ended)."""
    transaction.on_commit(lambda: _write("withdraw", trajectory_id, None))


def router_trajectories_served() -> Any:
    """The trajectories the router serves: every one not ended."""
    return Trajectory.objects.exclude(status__in=TERMINAL_TRAJECTORY_STATUSES)


def router_trajectories_sync() -> int:
    """Rebuild the registry from the rows (``router_trajectories_served``); how many it holds."""
    client = configured_redis()
    if client is None:
        return 0
    rows = router_trajectories_served().values_list("pk", "job_id")
    mapping: dict[Any, Any] = {str(pk): str(job_id) for pk, job_id in rows.iterator()}
    name = _names().trajectories
    with client.pipeline(transaction=True) as pipe:
        pipe.delete(name)
        if mapping:
            pipe.hset(name, mapping=mapping)
        pipe.execute()
    return len(mapping)
