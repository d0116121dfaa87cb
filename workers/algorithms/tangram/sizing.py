"""The key units an action may get under the scheduler's live policy (arl-tangram §4.1–§4.2).

DoP bounds (Loom's rule where the paper is silent): ``min_dop``/``max_dop`` narrow a scalable
action's feasible key units (§4.1's "priors to narrow the search space"), after the topology
has dropped the counts it could never give one action (``Topology.unit_counts``) and lowered
``min_dop`` to what every group can give (``Topology.min_dop_cap``). Admission
(Alg. 1 line 3) reserves the *smallest count of that narrowed set* and DPArrange chooses only
among that same set, so the all-at-minimum arrangement admission found is always one the DP can
return: no policy can leave a prefix that "cannot be arranged". Where the bounds exclude every
feasible count they yield to the demand (``action.bounded_options``); bounds never apply to
non-scalable actions, which keep their minimum units (§4.2). A topology may raise the lower
bound for one pass (``Topology.dop_floors``: the GPU pool's memory-derived floor); it acts as a
``min_dop`` on that key resource, capped by ``max_dop``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from workers.algorithms.tangram.action import (
    ActionSpec,
    Elasticity,
    ResourceDemand,
    bounded_options,
)
from workers.algorithms.tangram.entries import Waiting
from workers.algorithms.tangram.history import DurationHistory
from workers.algorithms.tangram.objective import Demand
from workers.algorithms.tangram.topology.base import Topology


class LivePolicy(Protocol):
    """What sizing reads of its scheduler, live: the policy, the topology, the history."""

    topology: Topology
    history: DurationHistory
    algorithm: str
    depth: int
    min_dop: int | None
    max_dop: int | None
    fixed_dop: int


@dataclass(frozen=True)
class CostShape:
    """What a scalable action's DPArrange cost row looks like apart from its ``T1``.

    ``T(k) = T1 · inverse_speedup[k] + mask[k]`` (Eq. 1; ``mask`` is +inf off the feasible
    ``options``), and the holding charge's unit-seconds are ``T1 · wasted_work()[k]``.
    """

    options: tuple[int, ...]
    inverse_speedup: NDArray[np.float64]
    mask: NDArray[np.float64]
    elasticity: Elasticity
    all_options: tuple[int, ...]  # the action's options under the policy, ``options`` a prefix

    def wasted_work(self) -> NDArray[np.float64]:
        """``k·T(k) − m·T(m)`` per unit of ``T1`` at the least option ``m`` (0 off the options):
        only a priced pass needs it. A prefix of the row over all the action's options, which
        is worked out once (an action deferred in one pass is a candidate again in the next,
        with another width); read-only."""
        return _wasted_work(self.elasticity, self.all_options)[: self.inverse_speedup.shape[0]]


class UnitSizing:
    def __init__(self, policy: LivePolicy) -> None:
        self.policy = policy
        # Each distinct key demand's options under the policy, for one pass (the topology may
        # gain nodes or change limits between passes).
        self._options_memo: dict[tuple[str, ResourceDemand], tuple[int, ...]] = {}
        self._policy_epoch = 0  # bumped by every policy change: cached demands go stale
        # the topology's per-pass floors on key units (``Topology.dop_floors``), by resource
        self._floors: dict[str, int] = {}

    def policy_changed(self) -> None:
        self._policy_epoch += 1
        self.forget()

    def set_floors(self, floors: dict[str, int]) -> None:
        """This pass's floors on key units (``Topology.dop_floors``): a new floor changes the
        options, so what was cached under the old one goes stale (as on a policy change)."""
        if floors != self._floors:
            self._floors = floors
            self.policy_changed()

    def forget(self) -> None:
        """Drop the options worked out so far (a new pass, or a new policy)."""
        self._options_memo.clear()

    def t1(self, spec: ActionSpec) -> float:
        return self.policy.history.t1(spec)

    def options(self, spec: ActionSpec) -> tuple[int, ...]:
        """The key units a scalable action may get: what the topology can give one action,
        narrowed by the DoP bounds (see the module docstring); never empty."""
        key = spec.key_resource
        assert key is not None
        demand = spec.resources[key]
        memo_key = (key, demand)
        options = self._options_memo.get(memo_key)
        if options is None:
            policy = self.policy
            feasible = demand.options()
            usable = policy.topology.unit_counts(key, feasible) or feasible
            low, cap = policy.min_dop, policy.topology.min_dop_cap(key)
            if low is not None and cap is not None:
                low = min(low, cap)
            floor = self._floors.get(key)
            if floor is not None and (low is None or floor > low):
                high = policy.max_dop
                low = floor if high is None else min(floor, high)
            options = bounded_options(usable, low, policy.max_dop)
            self._options_memo[memo_key] = options
        return options

    def cost_shape(self, spec: ActionSpec, width: int) -> CostShape:
        """The cost row's shape for a scalable action, tabulated up to ``width`` units: its
        options up to ``width`` (at least its smallest)."""
        elasticity = spec.elasticity
        assert elasticity is not None
        options = self.options(spec)
        fitting = options[: bisect_right(options, width)] or options[:1]
        size = fitting[-1] + 1
        # a prefix of the row at the action's widest option: the same values (each entry
        # depends on its own ``k`` only), cached across passes whatever width a pass has free
        inverse = _inverse_speedup(elasticity, options[-1] + 1)[:size]
        return CostShape(fitting, inverse, _mask(fitting), elasticity, options)

    def is_elastic(self, spec: ActionSpec) -> bool:
        return spec.scalable and len(self.options(spec)) > 1

    def least_key_units(self, spec: ActionSpec) -> int:
        """The key units admission reserves: the smallest option under the policy.

        Equal to the demand's minimum unless ``min_dop`` lies above it (the minimum is always
        a count the topology can give: ``submit`` checked ``never_fits``), which keeps the
        common case free of the options lookup.
        """
        key = spec.key_resource
        assert key is not None
        minimum = spec.resources[key].minimum
        if not spec.scalable:
            return minimum
        min_dop = self.policy.min_dop
        if (min_dop is None or min_dop <= minimum) and not self._floors:
            return minimum
        return self.options(spec)[0]

    def request_units(self, spec: ActionSpec) -> dict[str, int]:
        """The units admission asks the topology for (Alg. 1 line 3; ``fixed-dop``: §6.4)."""
        units = spec.min_units()
        key = spec.key_resource
        if key is None or not spec.scalable:
            return units
        if self.policy.algorithm == "fixed-dop":
            options = self.options(spec)
            fitting = [u for u in options if u <= self.policy.fixed_dop]
            units[key] = fitting[-1] if fitting else options[0]
        else:
            units[key] = self.least_key_units(spec)
        return units

    def min_demand(self, spec: ActionSpec) -> tuple[int, float]:
        """Key units admission would reserve and the duration there (Alg. 2's "minimum
        resources"); an action without a key resource counts as one unit."""
        key = spec.key_resource
        units = self.least_key_units(spec) if key else 1
        return units, spec.duration(units, self.t1(spec))

    def waiting_demand(self, entry: Waiting) -> tuple[int, float]:
        """``min_demand`` of a waiting action, computed once and kept until the policy or the
        tool's duration history changes. Under a ``min_dop`` the least units depend on the
        topology (``options``), which may change between passes: nothing is cached then."""
        spec = entry.spec
        if self.policy.min_dop is not None:
            return self.min_demand(spec)
        stamp = (
            self._policy_epoch,
            0 if spec.t1 is not None else self.policy.history.observations(spec.tool),
        )
        if entry.demand is None or entry.demand_stamp != stamp:
            entry.demand = self.min_demand(spec)
            entry.demand_stamp = stamp
        return entry.demand

    def exploration_units(self, spec: ActionSpec) -> tuple[int, ...]:
        """The key units Alg. 2 explores for the first remaining action: the paper's first
        ``depth`` options, plus (Loom's own) the doubling ladder from the smallest option to the
        largest, so that a deferral is weighed against a wide start (see ``objective``).

        The ladder only where the topology's units are interchangeable: the estimate starts a
        ``k``-unit allocation at the ``k``-th release of its per-unit profile, which on GPUs
        (buddy chunks, §5.3) is only a lower bound on when a free chunk of ``k`` appears, so
        wide rungs there made deferring look cheaper than it is and left chunks idle while
        candidates waited for a wide one. GPU pools keep the paper's ``depth`` options.
        """
        options = self.options(spec)
        if not self.policy.topology.units_interchangeable:
            return options[: self.policy.depth]
        return _exploration_ladder(options, self.policy.depth)

    def first_options(self, spec: ActionSpec) -> list[tuple[int, float]]:
        """The allocations Alg. 2 explores for the first remaining action, with durations."""
        if self.policy.algorithm != "elastic" or not spec.scalable:
            return [self.min_demand(spec)]
        assert spec.elasticity is not None
        units = self.exploration_units(spec)
        t1 = self.t1(spec)
        return [
            (u, t1 * inverse)
            for u, inverse in zip(units, _ladder_inverse(spec.elasticity, units), strict=True)
        ]

    def explored(self, entry: Waiting) -> tuple[list[tuple[int, float]], float]:
        """``first_options`` of a waiting action and its work at its least units (``min_demand``'s
        units times seconds), kept on the entry while the policy, the action's options and its
        ``T1`` stay the same: a deferred action is the first remaining action of a trial again
        in the next pass."""
        spec = entry.spec
        scalable = self.policy.algorithm == "elastic" and spec.scalable
        stamp = (self._policy_epoch, self.options(spec) if scalable else None, self.t1(spec))
        cached = entry.explored
        if cached is not None and cached[0] == stamp:
            return cached[1]
        least_units, least_seconds = self.min_demand(spec)
        explored = (self.first_options(spec), least_units * least_seconds)
        entry.explored = (stamp, explored)
        return explored

    def efficient_demands(self, entries: Iterable[Waiting], price: float) -> list[Demand]:
        """``efficient_demand`` of each entry (a pass reads one per remaining action)."""
        return [self.efficient_demand(entry, price) for entry in entries]

    def efficient_demand(self, entry: Waiting, price: float) -> tuple[int, float]:
        """Key units and seconds Alg. 2's estimate gives a *remaining* action in a priced split
        (Loom's own model, replacing the paper's "minimum resources").

        An elastic action is estimated at the allocation DPArrange would give it under the
        holding price: the unit count on its exploration ladder minimising ``T(k)`` plus
        ``price`` times the unit-seconds it wastes (``eviction.holding_price``). Both terms
        scale with ``T1``, so the choice depends on the price alone: the lower envelope of the
        ladder's cost lines is worked out once per action (``_price_envelope``) and a pass
        reads it with one bisection (cached until the policy changes; a scalable action's ``T1`` is
        its profile). A non-elastic action keeps ``waiting_demand``.
        """
        envelope = entry.envelope
        if entry.envelope_stamp == self._policy_epoch and self.policy.min_dop is None:
            if envelope is None:  # not elastic under this policy
                return self.waiting_demand(entry)
            thresholds, demands = envelope
            return demands[bisect_right(thresholds, price)]
        spec = entry.spec
        entry.envelope, entry.envelope_stamp = None, self._policy_epoch
        if self.policy.algorithm != "elastic" or not self.is_elastic(spec):
            return self.waiting_demand(entry)
        assert spec.elasticity is not None
        units = self.exploration_units(spec)
        envelope = _price_envelope(units, _ladder_inverse(spec.elasticity, units), self.t1(spec))
        entry.envelope = envelope
        thresholds, demands = envelope
        return demands[bisect_right(thresholds, price)]


Envelope = tuple[list[float], list[tuple[int, float]]]


def _price_envelope(units: tuple[int, ...], inverse: list[float], t1: float) -> Envelope:
    """For ``cost_k(price) = inverse_k + price · wasted_k`` over the ladder ``units`` (per
    unit of ``T1``; ``wasted_k = k·inverse_k − m·inverse_m`` as in ``CostShape.wasted_work``):
    ``(thresholds, demands)`` such that prices in ``[thresholds[i-1], thresholds[i])`` are
    minimised by ``demands[i]``, a (units, seconds) pair for ``T1 = t1``. The lower envelope of
    lines, walked from price 0 upwards (each step moves to the line of smaller slope that
    crosses first)."""
    least = units[0] * inverse[0]
    wasted = [max(0.0, k * inv - least) for k, inv in zip(units, inverse, strict=True)]
    lines = range(len(units))  # the ladder's units are distinct: a line is its index
    # at price 0+ the least cost wins; among equal costs the smaller waste
    current = min(lines, key=lambda i: (inverse[i], wasted[i], units[i]))
    thresholds: list[float] = []
    demands = [(units[current], t1 * inverse[current])]
    price = 0.0
    while True:
        cost, waste = inverse[current], wasted[current]
        step = -1  # the line crossed first (at ``step_price``); the smaller waste on a tie
        step_price = step_waste = 0.0
        for line in lines:
            line_waste = wasted[line]
            if line_waste >= waste:
                continue
            crossing = (inverse[line] - cost) / (waste - line_waste)
            if crossing < price:
                crossing = price
            if (
                step < 0
                or crossing < step_price
                or (crossing == step_price and line_waste < step_waste)
            ):
                step, step_price, step_waste = line, crossing, line_waste
        if step < 0:
            return thresholds, demands
        price = step_price
        current = step
        thresholds.append(price)
        demands.append((units[current], t1 * inverse[current]))


@lru_cache(maxsize=1024)
def _exploration_ladder(options: tuple[int, ...], depth: int) -> tuple[int, ...]:
    """``options[:depth]`` and the doubling ladder from the smallest option to the largest."""
    chosen = set(options[:depth])
    rung = options[0]
    for units in options:
        if units >= rung:
            chosen.add(units)
            rung = 2 * units
    chosen.add(options[-1])
    return tuple(sorted(chosen))


@lru_cache(maxsize=4096)
def _mask(options: tuple[int, ...]) -> NDArray[np.float64]:
    """0 at each of ``options``, +inf elsewhere up to the largest (``CostShape.mask``);
    read-only, shared by every action with the same options."""
    mask = np.full(options[-1] + 1, np.inf)
    mask[list(options)] = 0.0
    mask.setflags(write=False)
    return mask


@lru_cache(maxsize=8192)
def _wasted_work(elasticity: Elasticity, options: tuple[int, ...]) -> NDArray[np.float64]:
    """``CostShape.wasted_work`` over every one of ``options`` (up to the largest): each entry
    depends on its own index and the least option only, so a narrower row is a prefix."""
    inverse, least = _inverse_speedup(elasticity, options[-1] + 1), options[0]
    work = np.arange(inverse.shape[0]) * inverse - least * inverse[least]
    feasible = np.zeros(inverse.shape[0], dtype=bool)
    feasible[list(options)] = True
    wasted = np.where(feasible, np.maximum(work, 0.0), 0.0)
    wasted.setflags(write=False)
    return wasted


def _ladder_inverse(elasticity: Elasticity, units: tuple[int, ...]) -> list[float]:
    """``_inverse_speedup(elasticity, ...)[k]`` for each ``k`` of a ladder, in plain floats: the
    same IEEE operations on the same operands (so the same values, bit for bit) without the
    array a fresh elasticity would build for a few entries."""
    efficiency = elasticity.efficiency
    last = len(efficiency)
    return [1.0 / (efficiency[min(k, last) - 1] * k) for k in units]


@lru_cache(maxsize=8192)
def _inverse_speedup(elasticity: Elasticity, size: int) -> NDArray[np.float64]:
    """``1 / (E(k)·k)`` for ``k = 0..size-1`` (0 at ``k = 0``): Eq. 1 without ``T1``."""
    units = np.arange(1, size)
    efficiency = np.asarray(elasticity.efficiency)
    inverse = np.zeros(size)
    inverse[1:] = 1.0 / (efficiency[np.minimum(units, len(efficiency)) - 1] * units)
    inverse.setflags(write=False)
    return inverse
