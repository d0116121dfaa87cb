"""Opportunistic trajectory migration and the transmission scheduler (heddle §5.3).

When a trajectory's prediction changes, its rank among the *active* trajectories (longest first)
is recomputed; rather than re-running the DP, the DP's group sizes ``s_k`` are scaled by the
number of still-active trajectories ``A`` out of the ``N`` placed (``s_k · A / N``) and the rank is
looked up in the scaled cumulative capacities. If the target worker differs from the current one,
the trajectory migrates — the caller starts the KV transfer while the trajectory is in a tool call.

The transmission scheduler orders migration requests longest trajectory first and, each epoch,
greedily picks requests whose source and destination are both free of selected or running
transfers (endpoint exclusivity), so a batch of transfers never shares a worker.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np


def scaled_capacities(group_sizes: Sequence[int], active_count: int) -> np.ndarray:
    """Cumulative upper rank bounds of each group after scaling by ``active / placed``.

    A non-empty group keeps at least one slot: scaled literally, the DP's small groups of long
    trajectories (often a single one) shrink below one rank as trajectories finish, and the
    longest survivors would be sent to the short-trajectory workers.
    """
    sizes = np.asarray(group_sizes, dtype=float)
    placed = sizes.sum()
    if placed <= 0:
        raise ValueError("group sizes must place at least one trajectory")
    return np.cumsum(np.maximum(sizes * (active_count / placed), np.minimum(sizes, 1.0)))


def migration_target(rank: int, group_sizes: Sequence[int], active_count: int) -> int:
    """Group index of the trajectory at ``rank`` (0 = longest) among ``active_count`` active."""
    if not 0 <= rank < max(active_count, 1):
        raise ValueError(f"rank {rank} outside 0..{active_count - 1}")
    bounds = scaled_capacities(group_sizes, active_count)
    group = int(np.searchsorted(bounds, rank + 0.5, side="left"))  # past the end: last group
    return min(group, len(group_sizes) - 1)


TrajectoryId = TypeVar("TrajectoryId", bound=Hashable)


@dataclass(frozen=True)
class MigrationRequest:
    trajectory_id: Hashable
    source: int
    destination: int
    predicted_length: float


def plan_migrations(
    predicted_lengths: Mapping[TrajectoryId, float],
    current_workers: Mapping[TrajectoryId, int],
    group_sizes: Sequence[int],
    group_workers: Sequence[int],
    changed: Sequence[TrajectoryId],
    *,
    hysteresis: float = 0.25,
) -> list[MigrationRequest]:
    """Migration requests for the trajectories in ``changed`` whose scaled-partition worker moved.

    ``predicted_lengths`` covers every active trajectory (predicted total length);
    ``group_workers[k]`` is the worker holding DP group ``k``.

    Two guards of ours, both aimed at noisy predictions: ``hysteresis`` — a trajectory moves only
    when its rank leaves its current group's scaled range by more than ``hysteresis · (size + 4)``
    ranks (otherwise trajectories near a boundary ping-pong, each move a KV transfer the next tool
    call may not hide); and capacity — a move is skipped when the target already holds its scaled
    share ``ceil(s_k · A / N)`` of trajectories that *belong* there (by the same hysteresis; those
    that no longer do are on their way out), movers taken longest first, so the long-trajectory
    workers cannot fill up and lose the DP's interference bound.
    """
    active = list(predicted_lengths)
    lengths = np.asarray([predicted_lengths[t] for t in active], dtype=float)
    order = np.argsort(-lengths, kind="stable")
    rank_of = {active[int(index)]: rank for rank, index in enumerate(order)}
    group_of_worker = {worker: k for k, worker in enumerate(group_workers)}
    bounds = np.concatenate([[0.0], scaled_capacities(group_sizes, len(active))])
    capacity = np.ceil(np.diff(bounds))

    def belongs(rank: int, group: int) -> bool:
        margin = hysteresis * (bounds[group + 1] - bounds[group] + 4.0)
        return bool(bounds[group] - margin <= rank + 0.5 < bounds[group + 1] + margin)

    occupancy: dict[int, int] = {}
    for trajectory in active:
        worker = current_workers[trajectory]
        group = group_of_worker.get(worker)
        if group is not None and belongs(rank_of[trajectory], group):
            occupancy[worker] = occupancy.get(worker, 0) + 1
    requests = []
    for trajectory in sorted(
        (t for t in dict.fromkeys(changed) if t in rank_of), key=lambda t: rank_of[t]
    ):
        rank = rank_of[trajectory]
        source = current_workers[trajectory]
        current_group = group_of_worker.get(source)
        if current_group is not None and belongs(rank, current_group):
            continue
        group = migration_target(rank, group_sizes, len(active))
        destination = group_workers[group]
        if destination == source:
            continue
        if occupancy.get(destination, 0) + 1 > capacity[group]:
            continue  # the target already holds its scaled share
        occupancy[destination] = occupancy.get(destination, 0) + 1
        requests.append(
            MigrationRequest(trajectory, source, destination, predicted_lengths[trajectory])
        )
    return requests


class TransmissionScheduler:
    """Endpoint-exclusive KV transfers, longest trajectory first (heddle §5.3). No clock: the
    caller reports completions."""

    def __init__(self) -> None:
        self._waiting: dict[Hashable, MigrationRequest] = {}
        self._running: dict[Hashable, MigrationRequest] = {}

    @property
    def waiting(self) -> list[MigrationRequest]:
        return list(self._waiting.values())

    @property
    def running(self) -> list[MigrationRequest]:
        return list(self._running.values())

    def busy_endpoints(self) -> set[int]:
        return {w for r in self._running.values() for w in (r.source, r.destination)}

    def submit(self, request: MigrationRequest) -> None:
        """Queue a request; a newer one for the same trajectory replaces a waiting one."""
        if request.source == request.destination:
            raise ValueError("a migration needs two different workers")
        if request.trajectory_id in self._running:
            raise KeyError(f"{request.trajectory_id!r} is already migrating")
        self._waiting[request.trajectory_id] = request

    def cancel(self, trajectory_id: Hashable) -> bool:
        return self._waiting.pop(trajectory_id, None) is not None

    def next_batch(self) -> list[MigrationRequest]:
        """Start every waiting request that conflicts with no running or selected transfer,
        longest first; they move to *running*."""
        busy = self.busy_endpoints()
        chosen = []
        for request in sorted(self._waiting.values(), key=lambda r: -r.predicted_length):
            if request.source in busy or request.destination in busy:
                continue
            chosen.append(request)
            busy.update((request.source, request.destination))
        for request in chosen:
            del self._waiting[request.trajectory_id]
            self._running[request.trajectory_id] = request
        return chosen

    def complete(self, trajectory_id: Hashable) -> MigrationRequest:
        return self._running.pop(trajectory_id)
