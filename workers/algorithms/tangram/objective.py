"""Objective approximation for the greedy eviction (arl-tangram §4.2, App. A, Algorithm 2).

``objective = exactObj + approxObj``: the candidates' execution times come exactly from
DPArrange; the rest of the queue (same key resource) is estimated by inserting each action, at
its minimum units, into the completion heap in FCFS order — it starts when the earliest running
action completes. The first remaining action explores ``depth`` allocations (its ``depth``
smallest feasible unit counts) and the best total wins.

Times are relative to ``now``: queueing that already happened is the same for every choice and
cancels out of the comparison. Algorithm 2 as printed pops the later actions from ``heap``
rather than ``tmpHeap`` (line 15); we pop from ``tmpHeap``, the evident intent.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence


def estimate_remaining(
    completion_heap: Sequence[float],
    first_options: Sequence[float],
    rest_durations: Sequence[float],
    depth: int,
) -> float:
    """Algorithm 2 ``estimate``: summed completion times of the remaining actions.

    ``completion_heap``: completion times (relative to now) of running and just-selected actions,
    already a valid heap. ``first_options``: the first remaining action's durations for its
    feasible unit counts, smallest count first. ``rest_durations``: the others at minimum units.
    """
    if not first_options:
        return 0.0
    best = math.inf
    heappop, heapreplace, heappush = heapq.heappop, heapq.heapreplace, heapq.heappush
    for first in first_options[: max(1, depth)]:
        heap = list(completion_heap)
        start = heappop(heap) if heap else 0.0
        end = start + first
        total = end
        heappush(heap, end)
        for duration in rest_durations:
            end = heap[0] + duration
            heapreplace(heap, end)
            total += end
        if total < best:
            best = total
    return best


def approximated_objective(
    candidate_total: float,
    base_heap: Sequence[float],
    candidate_durations: Sequence[float],
    first_options: Sequence[float],
    rest_durations: Sequence[float],
    depth: int,
) -> float:
    """Algorithm 2 ``getApproximatedObjective``: exact candidate ACTs + estimated rest."""
    heap = list(base_heap)
    heap.extend(candidate_durations)
    heapq.heapify(heap)
    return candidate_total + estimate_remaining(heap, first_options, rest_durations, depth)
