"""The units running actions hold in one group, kept for the per-unit profile of Alg. 2.

One slot per running action in flat arrays (expected end, units per resource), updated when an
action starts or ends, so a pass reads a group's release times with one vectorised expression
instead of walking its running actions (Loom's own bookkeeping; the profile is ``objective``'s).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray


class HeldUnits:
    def __init__(self) -> None:
        self._slots: dict[str, int] = {}
        self._spare: list[int] = []
        self._ends = np.zeros(8)
        self._units: dict[str, NDArray[np.int64]] = {}

    def __len__(self) -> int:
        return len(self._slots)

    def add(self, action_id: str, expected_end: float, units: Mapping[str, int]) -> None:
        slot = self._spare.pop() if self._spare else len(self._slots)
        if slot >= self._ends.shape[0]:
            self._grow(2 * self._ends.shape[0])
        self._slots[action_id] = slot
        self._ends[slot] = expected_end
        for resource, count in units.items():
            held = self._units.get(resource)
            if held is None:
                held = self._units[resource] = np.zeros(self._ends.shape[0], dtype=np.int64)
            held[slot] = count

    def remove(self, action_id: str) -> None:
        slot = self._slots.pop(action_id, None)
        if slot is None:
            return
        for held in self._units.values():
            held[slot] = 0
        self._spare.append(slot)

    def release_times(self, resource: str, now: float) -> list[float]:
        """One entry per held unit of ``resource``: seconds from ``now`` until it is released
        (0 for an action already past its expected end)."""
        held = self._units.get(resource)
        if held is None:
            return []
        remaining: list[float] = np.repeat(np.maximum(self._ends - now, 0.0), held).tolist()
        return remaining

    def _grow(self, size: int) -> None:
        ends = np.zeros(size)
        ends[: self._ends.shape[0]] = self._ends
        self._ends = ends
        for resource, held in self._units.items():
            grown = np.zeros(size, dtype=np.int64)
            grown[: held.shape[0]] = held
            self._units[resource] = grown
