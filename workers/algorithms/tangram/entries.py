"""What the elastic scheduler hands out and what it keeps per action (arl-tangram §4.2)."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from workers.algorithms.tangram.action import ActionSpec


@dataclass(frozen=True)
class Assignment:
    """What the scheduler hands an agent: where, which concrete units, at what DoP."""

    action_id: str
    node: str
    units: Mapping[str, int]
    core_ids: tuple[int, ...]
    gpu_ids: tuple[int, ...]
    quota_units: Mapping[str, int]
    dop: int
    expected_seconds: float
    load_seconds: float
    started_at: float


@dataclass(frozen=True)
class CompletedAction:
    action_id: str
    submitted_at: float
    started_at: float
    finished_at: float
    dop: int

    @property
    def act(self) -> float:
        """Action completion time: queueing + execution (arl-tangram Eq. 2)."""
        return self.finished_at - self.submitted_at


@dataclass
class Waiting:
    spec: ActionSpec
    submitted_at: float
    # (key units, seconds) at the units admission reserves, cached with the stamp it was
    # computed under (``sizing.UnitSizing.waiting_demand``)
    demand: tuple[int, float] | None = None
    demand_stamp: tuple[int, int] | None = None
    # the price envelope of the estimate's allocation (``sizing.UnitSizing.efficient_demand``)
    envelope: tuple[list[float], list[tuple[int, float]]] | None = field(default=None, repr=False)
    envelope_stamp: int | None = None  # the policy epoch it was worked out under
    # the allocations Alg. 2 explores when it is the first remaining action, and its work at
    # its least units, with the stamp they were worked out under (``sizing.UnitSizing.explored``)
    explored: tuple[object, tuple[list[tuple[int, float]], float]] | None = field(
        default=None, repr=False
    )


@dataclass
class Running:
    spec: ActionSpec
    submitted_at: float
    assignment: Assignment
    group: Hashable
    expected_end: float


@dataclass
class Candidate:
    """A waiting action admitted by this pass (Alg. 1 line 3), with the units it would get."""

    entry: Waiting
    group: Hashable
    units: dict[str, int]
    split_key: str | None = None
    costs: NDArray[np.float64] | None = field(default=None, repr=False)
    durations: NDArray[np.float64] | None = field(default=None, repr=False)

    def duration_at(self, units: int) -> float:
        assert self.durations is not None
        return float(self.durations[units])
