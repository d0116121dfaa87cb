"""What the Rollouts page reads from the LLM router's trajectory-state stream (heddle §4–§5,
darts §4), beside the ``Trajectory`` rows.

The router appends each trajectory's whole state to ``{prefix}:router:trajectory-state``
(``workers.router.registry.StatePublisher``); the control plane persists the row fields of it
(``apps.trajectories.router_state``). Two things live only in that stream: the priority and the
migrations of a trajectory, and the candidates of a DARTS group rollout (router-side trajectories
with ids ``<group>/<prompt>/<sample>``, never rows). The page reads the newest entries, newest
first a page at a time (``XREVRANGE``; the control plane's consumer group is untouched), keeping
the newest state of each trajectory. Without Redis (the embedded mode) the router runs in this
process and hands its states to ``router_states_keep``; the page reads the newest of those.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis

from controlplane.redis_client import configured_redis, key_prefix
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.dashboard")

STATE_SCAN = 5000  # most entries read per page view
GROUP_SCAN = 2000  # entries always read for the group rollouts (the newest activity)
STATE_PAGE = 500
ROUTER_GROUP_LIMIT = 20
ENDED = frozenset({"finished", "aborted", "failed"})

# The embedded router's states, oldest first (None: no router in this process).
_in_process: deque[Mapping[str, Any]] | None = None
_in_process_lock = threading.Lock()


def router_states_keep(states: Iterable[Mapping[str, Any]]) -> None:
    """Keep the newest states of a router running in this process (the embedded mode, which has
    no stream), as many as a page view reads of the stream."""
    global _in_process
    with _in_process_lock:
        if _in_process is None:
            _in_process = deque(maxlen=STATE_SCAN)
        _in_process.extend(states)


def router_states_forget() -> None:
    """The router of this process stopped: its states are no longer the page's to read."""
    global _in_process
    with _in_process_lock:
        _in_process = None


def _in_process_newest_first() -> list[Mapping[str, Any]] | None:
    with _in_process_lock:
        return None if _in_process is None else list(reversed(_in_process))


@dataclass
class RouterStreamView:
    """``fields``: trajectory id → priority and migrations (the wanted rows found);
    ``candidates``: router group candidate id → its newest state."""

    fields: dict[int, dict[str, int]] = field(default_factory=dict)
    candidates: dict[str, dict[str, Any]] = field(default_factory=dict)
    scanned: int = 0


def _visit(
    state: Mapping[str, Any], wanted: set[str], job: str | None, view: RouterStreamView
) -> None:
    """Keep the entry if it is the newest seen of a wanted row or of a group candidate."""
    trajectory = str(state.get("trajectory", ""))
    if trajectory in wanted and int(trajectory) not in view.fields:
        priority, migrations = state.get("priority"), state.get("migrations")
        view.fields[int(trajectory)] = {
            "priority": priority if isinstance(priority, int) else 0,
            "migrations": migrations if isinstance(migrations, int) else 0,
        }
    elif (
        trajectory.count("/") >= 2
        and trajectory not in view.candidates
        and (job is None or str(state.get("job")) == job)
    ):
        view.candidates[trajectory] = dict(state)


def router_stream_read(
    trajectory_ids: Iterable[int], job_id: int | None = None
) -> RouterStreamView | None:
    """The newest router states of ``trajectory_ids`` and of the group candidates (of ``job_id``
    when given); None when no Redis is configured or it cannot be read."""
    wanted = {str(pk) for pk in trajectory_ids}
    job = str(job_id) if job_id is not None else None
    client = configured_redis()
    if client is None:
        kept = _in_process_newest_first()
        if kept is None:
            return None
        view = RouterStreamView(scanned=len(kept))
        for state in kept:
            _visit(state, wanted, job, view)
        return view
    stream = RegistryNames(key_prefix()).trajectory_state
    view = RouterStreamView()
    newest_unread = "+"
    try:
        while view.scanned < STATE_SCAN and (
            view.scanned < GROUP_SCAN or len(view.fields) < len(wanted)
        ):
            entries: Any = client.xrevrange(stream, max=newest_unread, count=STATE_PAGE)
            for _, fields in entries:
                try:
                    state = json.loads(fields[b"state"])
                except (KeyError, TypeError, ValueError):
                    continue
                if isinstance(state, dict):
                    _visit(state, wanted, job, view)
            view.scanned += len(entries)
            if len(entries) < STATE_PAGE:
                break
            last_id = entries[-1][0]
            newest_unread = "(" + (last_id.decode() if isinstance(last_id, bytes) else last_id)
    except redis.RedisError as error:
        log.warning("rollouts: router state stream not readable: %s", error)
        return None
    return view


def router_groups(view: RouterStreamView) -> list[dict[str, Any]]:
    """Group rollouts by their candidates' newest states, the most recently active first: how
    many candidates were drawn, still decode, finished, and were aborted (early stop or tail
    pruning, darts §4.3)."""
    groups: dict[str, dict[str, Any]] = {}
    for trajectory, state in view.candidates.items():
        group, prompt, _ = trajectory.rsplit("/", 2)
        status = str(state.get("status", ""))
        row = groups.setdefault(
            group,
            {"group": group, "job": state.get("job"), "prompts": set(), "candidates": 0,
             "running": 0, "finished": 0, "aborted": 0, "failed": 0, "at": 0.0},
        )  # fmt: skip
        row["prompts"].add(prompt)
        row["candidates"] += 1
        row[status if status in ENDED else "running"] += 1
        at = state.get("at")
        if isinstance(at, int | float):
            row["at"] = max(row["at"], float(at))
    rows = sorted(groups.values(), key=lambda row: row["at"], reverse=True)[:ROUTER_GROUP_LIMIT]
    return [{**row, "prompts": len(row["prompts"])} for row in rows]
