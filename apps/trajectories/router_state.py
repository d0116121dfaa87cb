"""The router's trajectory state, persisted to the ``Trajectory`` rows (heddle §4).

The router appends each trajectory's whole state (steps, tokens, predicted remaining length,
worker, timings) to the stream ``{prefix}:router:trajectory-state`` whenever it changes
(``workers.router.registry.StatePublisher``). ``router_state_drain`` — a Celery beat task in
production — reads it in the consumer group ``control-plane``, keeps the latest state of each
trajectory in the batch and applies it through ``trajectory_update``, the one owner of a
trajectory's progress rules (counts never go back, an ended trajectory stays ended), then
acknowledges. Entries a crashed drain read but never acknowledged are claimed again after
``CLAIM_IDLE_MS``. In the embedded mode (no Redis) there is no router and this does nothing.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

from apps.trajectories.models import Trajectory, TrajectoryStatus
from apps.trajectories.router_control import llm_worker_reports_apply
from apps.trajectories.services import (
    UPDATABLE_FIELDS,
    TrajectoryUpdateError,
    trajectory_final_state_keep,
    trajectory_update,
)
from controlplane.redis_client import configured_redis, key_prefix
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.router_state")

STATE_GROUP = "control-plane"
CLAIM_IDLE_MS = 30_000
# The row's progress fields the router reports (all but the reward, which the trainer sets); the
# rest of a snapshot (priority, migrations, at) is the router's own and shows on its live state.
STATE_FIELDS = tuple(field for field in UPDATABLE_FIELDS if field != "reward")
MAX_STEP_RECORDS = 10_000  # steps of one trajectory kept for the predictor's training
EXPIRED = "expired"  # the router forgot an idle trajectory: its status stays as it was
WORKERS = "workers"  # a router's report of its LLM workers, not a trajectory's state
_STATUSES = frozenset(TrajectoryStatus.values)


@dataclass
class Drained:
    read: int = 0  # stream entries read
    applied: int = 0  # trajectories updated
    skipped: int = 0  # states that could not apply (unknown, foreign, ended, malformed)


def state_changes(state: Mapping[str, Any]) -> dict[str, Any]:
    """The row changes one router snapshot asks for; ValueError if it is malformed."""
    changes: dict[str, Any] = {}
    for field in STATE_FIELDS:
        if field in state:
            changes[field] = state[field]
    if state.get("event") == EXPIRED or changes.get("status") not in _STATUSES:
        changes.pop("status", None)
    for field in ("steps", "tokens", "predicted_remaining_tokens", "prompt_tokens"):
        if field in changes and not _count(changes[field]):
            raise ValueError(f"{field}: not a count")
    for field in ("queueing_s", "generation_s", "tool_s", "total_s"):
        if field in changes:
            value = changes[field]
            if not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{field}: not a duration")
            changes[field] = float(value)
    if "llm_worker" in changes:
        changes["llm_worker"] = str(changes["llm_worker"])[:200]
    if "step_records" in changes:
        changes["step_records"] = _step_records(changes["step_records"])
    return changes


def _count(value: Any) -> bool:
    """A non-negative integer (a JSON ``true`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _step_records(value: Any) -> list[list[float]]:
    """``[[output tokens, tool seconds after], …]``, one per step, at most ``MAX_STEP_RECORDS``."""
    if not isinstance(value, list) or len(value) > MAX_STEP_RECORDS:
        raise ValueError(f"step_records: not a list of at most {MAX_STEP_RECORDS} steps")
    records: list[list[float]] = []
    for step in value:
        if not (isinstance(step, list) and len(step) == 2 and _count(step[0])):
            raise ValueError("step_records: each step is [output tokens, tool seconds]")
        tool = step[1]
        if not isinstance(tool, (int, float)) or isinstance(tool, bool) or not 0 <= tool < 1e9:
            raise ValueError("step_records: tool seconds must be a non-negative number")
        records.append([step[0], float(tool)])
    return records


def router_states_apply(states: Iterable[Mapping[str, Any]]) -> Drained:
    """Apply the latest state of each trajectory among ``states`` (in stream order); the
    routers' ``workers`` entries go to their workers' reports (``router_control``)."""
    latest: dict[int, Mapping[str, Any]] = {}
    outcome = Drained()
    reports: list[Mapping[str, Any]] = []
    for state in states:
        if isinstance(state, Mapping) and state.get("event") == WORKERS:
            reports.append(state)
            continue
        try:
            latest[int(state["trajectory"])] = state
        except (KeyError, TypeError, ValueError):
            outcome.skipped += 1
    if reports:
        stored, malformed = llm_worker_reports_apply(reports)
        outcome.applied += stored
        outcome.skipped += malformed
    jobs = dict(Trajectory.objects.filter(pk__in=list(latest)).values_list("pk", "job_id"))
    for trajectory_id, state in latest.items():
        if jobs.get(trajectory_id) is None or str(jobs[trajectory_id]) != str(state.get("job")):
            outcome.skipped += 1  # deleted meanwhile, or not this job's
            continue
        changes: dict[str, Any] = {}
        try:
            changes = state_changes(state)
            if changes:
                trajectory_update(trajectory_id=trajectory_id, changes=changes)
        except ValueError as error:  # TrajectoryUpdateError included
            # an ended trajectory, a count that went back (the REST API moved it meanwhile);
            # an ended one still takes what the router's late state adds to it
            if not _late_state_kept(trajectory_id, error, changes):
                log.info("router state of trajectory %s not applied: %s", trajectory_id, error)
                outcome.skipped += 1
                continue
        outcome.applied += 1
    return outcome


def _late_state_kept(trajectory_id: int, error: ValueError, changes: Mapping[str, Any]) -> bool:
    """A snapshot refused because the trainer's end arrived first: keep its counts, timings
    and records (``trajectory_final_state_keep``)."""
    if not isinstance(error, TrajectoryUpdateError) or not error.conflict:
        return False
    late = {field: value for field, value in changes.items() if field != "status"}
    return trajectory_final_state_keep(trajectory_id=trajectory_id, changes=late)


def router_state_drain(*, count: int = 1000, rounds: int = 10) -> Drained:
    """Read what the router published since the last drain (consumer group ``control-plane``),
    apply it, acknowledge it; at most ``rounds`` reads of ``count`` entries."""
    client = configured_redis()
    total = Drained()
    if client is None:
        return total
    stream = RegistryNames(key_prefix()).trajectory_state
    try:
        client.xgroup_create(stream, STATE_GROUP, id="0", mkstream=True)
    except redis.ResponseError as error:
        if "BUSYGROUP" not in str(error):
            raise
    consumer = f"{socket.gethostname()}-{os.getpid()}"
    for _ in range(rounds):
        # first what a crashed drain read and never acknowledged, then what is new
        claimed: Any = client.xautoclaim(
            stream, STATE_GROUP, consumer, min_idle_time=CLAIM_IDLE_MS, start_id="0-0", count=count
        )
        entries: list[Any] = list(claimed[1])
        if not entries:
            replies: Any = client.xreadgroup(STATE_GROUP, consumer, {stream: ">"}, count=count)
            entries = list(replies[0][1]) if replies else []
        if not entries:
            break
        states = []
        for _, fields in entries:
            try:
                states.append(json.loads(fields[b"state"]))
            except (KeyError, ValueError):
                total.skipped += 1
        done = router_states_apply(states)
        client.xack(stream, STATE_GROUP, *[entry_id for entry_id, _ in entries])
        total.read += len(entries)
        total.applied += done.applied
        total.skipped += done.skipped
        if len(entries) < count:
            break
    return total
