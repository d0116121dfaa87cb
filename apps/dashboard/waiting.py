"""Why a waiting action waits: the explanation operators ask peers' dashboards for (FACTS.md).

Pure: the caller gathers the pool's free capacity, quota usage and queue position from the database
(or the scheduler from memory) and this module turns them into one sentence. The order of the checks
follows arl-tangram §4.2: an action is a candidate only if the vectorised resource state can hold it
at minimum units and everything ahead of it in the FCFS queue fits too.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PoolState:
    """What a pool can offer right now."""

    name: str
    online_nodes: int
    free_units: dict[str, float] = field(default_factory=dict)
    total_units: dict[str, float] = field(default_factory=dict)
    quota_in_use: dict[str, int] = field(default_factory=dict)
    quota_limit: dict[str, int] = field(default_factory=dict)
    loaded_services: frozenset[str] = frozenset()


@dataclass(frozen=True)
class WaitingAction:
    """The facts about one queued action that decide why it is not running."""

    key_resource: str
    min_units: int
    queued_ahead: int
    service: str | None = None
    job_held_units: float | None = None
    job_quota_units: float | None = None


_UNIT_WORDS = {"cpu": "cores", "gpu": "GPUs", "memory_mb": "MB of memory"}


def wait_reason(action: WaitingAction, pool: PoolState | None) -> str:
    """One sentence saying what the action is waiting for."""
    if pool is None:
        return "no resource pool can run it"
    if pool.online_nodes == 0 and not action.key_resource.startswith("api:"):
        return f"no online node in pool {pool.name} (all draining or offline)"
    held, quota = action.job_held_units, action.job_quota_units
    if held is not None and quota is not None and held + action.min_units > quota:
        return f"job quota exhausted: holds {held:g} of {quota:g} {action.key_resource}"
    resource = action.key_resource
    if resource.startswith("api:"):
        api = resource.removeprefix("api:")
        used, limit = pool.quota_in_use.get(api, 0), pool.quota_limit.get(api)
        if limit is not None and used >= limit:
            return f"quota exhausted: {api} has {used}/{limit} calls in flight"
    else:
        free = pool.free_units.get(resource, 0.0)
        if free < action.min_units:
            word = _UNIT_WORDS.get(resource, f"units of {resource}")
            total = pool.total_units.get(resource, 0.0)
            return f"no {word} free: needs {action.min_units}, {free:g} of {total:g} free"
    if action.service and action.service not in pool.loaded_services and pool.loaded_services:
        return f"service loading: {action.service} is not resident on any GPU yet"
    if action.queued_ahead > 0:
        return f"queued behind {action.queued_ahead} earlier actions (FCFS)"
    return "next in line: waiting for the scheduler's next pass"
