"""Capacity and eviction policies of a buffer (artos §2.2, §4.2: the cyclic buffer).

Which slot the next step goes to when the buffer is full:

- ``FifoEviction``: the oldest slot (the cyclic buffer of Fig. 9; DQN's fixed-size replay).
- ``ReservoirEviction``: reservoir sampling (Vitter's Algorithm R): after ``t`` writes every
  step seen is held with equal probability ``capacity / t``; the incoming step may be dropped.
- ``KeepUnsampled``: on-policy data must never be lost before the learner used it, so a full
  buffer reuses only slots already sampled and otherwise refuses the write with
  ``BufferFullError`` (the caller blocks or fails; it never drops silently).
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Protocol

import numpy as np


class CapacityError(ValueError):
    """A policy declared with an invalid parameter; the message names it."""


class BufferFullError(RuntimeError):
    """A write would drop data the learner has not sampled yet; nothing was written."""


class EvictionPolicy(Protocol):
    capacity: int

    def place(self, rng: np.random.Generator) -> int | None:
        """The slot for the next write, or None to drop the incoming step."""
        ...

    def mark_sampled(self, slots: list[int] | np.ndarray) -> None:
        """The learner consumed these slots."""
        ...

    def release(self, slots: list[int] | np.ndarray) -> None:
        """These slots' data was discarded; they are free again."""
        ...

    def occupied(self) -> np.ndarray:
        """Slots holding data, oldest write first."""
        ...


def _capacity(capacity: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise CapacityError(f"capacity: expected a positive integer, got {capacity!r}")
    return capacity


class _SlotTable:
    """Write order per slot (-1: free), shared by the policies.

    Placing a step must not scan the whole table: a buffer of ``capacity`` slots takes a batch
    of steps at a time, and a scan per step made a write O(capacity) per step, under the
    buffer's lock. The lowest free slot comes from a cursor (every slot from it on was never
    written) and a heap of released slots below it; the oldest held slot from a queue in write
    order. Both skip stale entries lazily, so a write is amortised O(log capacity).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = _capacity(capacity)
        self.written = 0
        self.order = np.full(capacity, -1, dtype=np.int64)
        self.sampled = np.zeros(capacity, dtype=bool)
        self._fresh = 0  # every slot from here on is free
        self._freed: list[int] = []  # heap: released slots below ``_fresh`` (may be stale)
        self._by_age: deque[tuple[int, int]] = deque()  # (write order, slot), oldest first

    def store(self, slot: int) -> int:
        if slot >= self._fresh:  # slots skipped below it stay findable as free
            for skipped in range(self._fresh, slot):
                heapq.heappush(self._freed, skipped)
            self._fresh = slot + 1
        self.order[slot] = self.written
        self.sampled[slot] = False
        self._by_age.append((self.written, slot))
        self.written += 1
        if len(self._by_age) > 2 * self.capacity:  # stale entries of released slots
            held = self.occupied()
            self._by_age = deque(zip(self.order[held].tolist(), held.tolist(), strict=True))
        return slot

    def mark_sampled(self, slots: list[int] | np.ndarray) -> None:
        self.sampled[np.asarray(slots, dtype=np.int64)] = True

    def release(self, slots: list[int] | np.ndarray) -> None:
        index = np.asarray(slots, dtype=np.int64)
        for slot in np.unique(index[self.order[index] >= 0]).tolist():
            if slot < self._fresh:
                heapq.heappush(self._freed, slot)
        self.order[index] = -1
        self.sampled[index] = False

    def occupied(self) -> np.ndarray:
        held = np.flatnonzero(self.order >= 0)
        return held[np.argsort(self.order[held], kind="stable")]

    def first_free(self) -> int | None:
        """The lowest free slot, or None when every slot holds data."""
        while self._freed and self.order[self._freed[0]] >= 0:
            heapq.heappop(self._freed)  # released, then written again
        if self._freed:
            return self._freed[0]
        return self._fresh if self._fresh < self.capacity else None

    def oldest(self) -> int:
        """The held slot written longest ago (the table must hold data)."""
        while self.order[self._by_age[0][1]] != self._by_age[0][0]:
            self._by_age.popleft()  # released or overwritten since
        return self._by_age[0][1]


class FifoEviction(_SlotTable):
    """Overwrite the oldest slot once full."""

    def place(self, rng: np.random.Generator) -> int:
        free = self.first_free()
        if free is not None:
            return self.store(free)
        return self.store(self.oldest())


class ReservoirEviction(_SlotTable):
    """Algorithm R: keep a uniform sample of everything written (artos Table 1, uniform replay)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.seen = 0

    def place(self, rng: np.random.Generator) -> int | None:
        self.seen += 1
        free = self.first_free()
        if free is not None:
            return self.store(free)
        pick = int(rng.integers(0, self.seen))
        return self.store(pick) if pick < self.capacity else None


class KeepUnsampled(_SlotTable):
    """Never drop unsampled on-policy data: reuse sampled slots or refuse the write."""

    def __init__(self, capacity: int, name: str = "buffer") -> None:
        super().__init__(capacity)
        self.name = name

    def place(self, rng: np.random.Generator) -> int:
        free = self.first_free()
        if free is not None:
            return self.store(free)
        reusable = np.flatnonzero(self.sampled)
        if reusable.size == 0:
            raise BufferFullError(
                f"{self.name}: full ({self.capacity} steps) of data the learner has not sampled; "
                "on-policy data is never dropped: sample it, raise capacity, or wait"
            )
        oldest = reusable[np.argmin(self.order[reusable])]
        return self.store(int(oldest))


def eviction_policy(kind: str, capacity: int, name: str = "buffer") -> EvictionPolicy:
    """Build a policy by name: ``fifo``, ``reservoir`` or ``keep_unsampled``."""
    if kind == "fifo":
        return FifoEviction(capacity)
    if kind == "reservoir":
        return ReservoirEviction(capacity)
    if kind == "keep_unsampled":
        return KeepUnsampled(capacity, name)
    raise CapacityError(f"eviction: expected fifo, reservoir or keep_unsampled, got {kind!r}")
