"""Progressive priority scheduling and the policies it is compared with (heddle §4.2, Alg. 1).

Every policy is reduced to one number per pending generation request — *higher runs first* (the
SGLang ``priority`` convention) — plus whether a pending request may preempt a running one:

- ``PPS``: predicted total trajectory length, longest first (LPT, Graham 1969), preemptive. The
  priority is refreshed after every step from the progressive predictor, so a trajectory that
  turns out long climbs the queue.
- ``PPS_REMAINING``: PPS keyed by the predicted *remaining* length, what the progressive
  predictor is trained to output (heddle §4.1: (context, remaining_length) tuples) and the work
  left that LPT's makespan argument is about. §4.2 says only that PPS maps "the progressive
  trajectory prediction" to priorities, so both readings are kept. Under the total key a
  trajectory that gets no slot keeps its rank for good; under this one it climbs as the others
  finish steps.
- ``FCFS``: trajectory-level first come first served: the trajectory's first arrival time, so a
  trajectory returning from a tool call keeps its place.
- ``ROUND_ROBIN``: step-centric (verl/slime today): every returning step is a new request at the
  tail of the queue, priority = minus this step's submission time.
- ``SHORTEST_FIRST``: Autellix-like shortest-first, by predicted total length, shortest first.

The queue and the preemption test are plain data structures so the simulator's LLM workers and
the live router share them.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Hashable, Iterator
from dataclasses import dataclass


class PriorityPolicy(enum.StrEnum):
    PPS = "pps"
    PPS_REMAINING = "pps_remaining"
    FCFS = "fcfs"
    ROUND_ROBIN = "round_robin"
    SHORTEST_FIRST = "shortest_first"

    @property
    def preemptive(self) -> bool:
        """Only PPS preempts (heddle §4.2 "Preemptive Execution")."""
        return self in (PriorityPolicy.PPS, PriorityPolicy.PPS_REMAINING)

    @property
    def uses_prediction(self) -> bool:
        """The priority follows the predicted length, so a refreshed prediction re-keys it."""
        return self in (
            PriorityPolicy.PPS,
            PriorityPolicy.PPS_REMAINING,
            PriorityPolicy.SHORTEST_FIRST,
        )


def request_priority(
    policy: PriorityPolicy,
    *,
    predicted_total_tokens: float,
    trajectory_arrival: float,
    step_submitted_at: float,
    tokens_so_far: float = 0.0,
) -> float:
    """The priority of one step's generation request under ``policy`` (higher runs first);
    ``tokens_so_far``: the trajectory's tokens generated before this step."""
    if policy is PriorityPolicy.PPS:
        return float(predicted_total_tokens)
    if policy is PriorityPolicy.PPS_REMAINING:
        return float(predicted_total_tokens) - float(tokens_so_far)
    if policy is PriorityPolicy.SHORTEST_FIRST:
        return -float(predicted_total_tokens)
    if policy is PriorityPolicy.FCFS:
        return -float(trajectory_arrival)
    if policy is PriorityPolicy.ROUND_ROBIN:
        return -float(step_submitted_at)
    raise ValueError(f"unknown priority policy {policy!r}")


@dataclass(order=True)
class _Entry:
    sort_key: tuple[float, int]
    item: Hashable
    live: bool = True


class PriorityQueue:
    """Items ordered by priority; ties go to the earlier insertion (FIFO).

    ``highest_first=True`` pops the largest priority (the pending queue); ``False`` pops the
    smallest (the running set, whose minimum is the preemption victim). Removal is lazy so every
    operation is O(log n).
    """

    def __init__(self, *, highest_first: bool = True) -> None:
        self._sign = -1.0 if highest_first else 1.0
        self._heap: list[_Entry] = []
        self._entries: dict[Hashable, _Entry] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, item: Hashable) -> bool:
        return item in self._entries

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self._entries))

    def push(self, item: Hashable, priority: float) -> None:
        if item in self._entries:
            raise KeyError(f"{item!r} is already queued")
        entry = _Entry((self._sign * priority, next(self._seq)), item)
        self._entries[item] = entry
        heapq.heappush(self._heap, entry)

    def remove(self, item: Hashable) -> bool:
        entry = self._entries.pop(item, None)
        if entry is None:
            return False
        entry.live = False
        return True

    def update(self, item: Hashable, priority: float) -> None:
        """Re-key an item (a refreshed prediction); it keeps no FIFO seniority."""
        self.remove(item)
        self.push(item, priority)

    def _clean(self) -> None:
        while self._heap and not self._heap[0].live:
            heapq.heappop(self._heap)

    def peek(self) -> tuple[Hashable, float]:
        self._clean()
        if not self._heap:
            raise IndexError("peek from an empty PriorityQueue")
        top = self._heap[0]
        return top.item, self._sign * top.sort_key[0]

    def pop(self) -> tuple[Hashable, float]:
        item, priority = self.peek()
        heapq.heappop(self._heap)
        del self._entries[item]
        return item, priority

    def priority_of(self, item: Hashable) -> float:
        return self._sign * self._entries[item].sort_key[0]


def should_preempt(
    *, top_pending_priority: float, lowest_running_priority: float, batch_full: bool
) -> bool:
    """heddle Alg. 1: preempt when the batch is full and a pending request strictly outranks the
    lowest-priority running one (strictly, so equal priorities never thrash)."""
    return batch_full and top_pending_priority > lowest_running_priority
