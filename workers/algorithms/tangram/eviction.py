"""The elastic part of a pass: split, cost, evict from the tail (arl-tangram §4.2, Alg. 1 l. 5–12).

The admitted candidates are split by (group, key resource); per split that holds an elastic
action, the tail is greedily evicted while the approximated objective (Alg. 2) improves, with
DPArrange (Alg. 3/4) giving the exact allocation of every candidate prefix in one DP.

Deviations, each for a stated reason:
- a split may be evicted entirely (Alg. 1 lets ``t`` reach ``|C_j|``) only while something in
  its group is running or starting, else the estimate would wait for a completion that never
  comes; since the kept set is a prefix, the head cannot starve;
- DPArrange's GetDuration (Alg. 3 line 17, supplied by the topology's operator) adds the
  restore time a GPU-service action would pay at that DoP: the topology hands the free chunks
  that cache the service to the candidates in FCFS order and charges the rest (§5.3's EOE
  cost, counted per chunk: ``topology.gpu``);
- DPArrange's costs carry a holding price for wasted unit-seconds (``holding_price``, Loom's
  own; not on GPU-service splits), and Alg. 2 reads a per-unit completion profile
  (``objective``) in which the units a pass leaves idle are released at the next completion
  (the next pass), and, in a priced split, places the remaining actions at the allocation the
  price would give them (``_demand``; the scheduler's ``rest_model``);
- a split is keyed by (group, resource): a CPU node is scheduled on its own (§5.2). Non-elastic
  actions join the split of the resource they use (their single option in the DP), so the
  tail eviction can hold them back to widen an elastic action ahead of them.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.dparrange import PrefixArrangement
from workers.algorithms.tangram.entries import Candidate, Waiting
from workers.algorithms.tangram.held import HeldUnits
from workers.algorithms.tangram.objective import Demand, Option, approximated_objective
from workers.algorithms.tangram.sizing import UnitSizing
from workers.algorithms.tangram.topology.base import Accommodation, Topology

DEFERRED = "deferred by elastic eviction"
# How Alg. 2 estimates the remaining actions of a priced split: "efficient" at the allocation
# the holding price would give them (Loom's own), "minimum" at their minimum units (the paper).
REST_MODELS = ("efficient", "minimum")


@dataclass
class _Split:
    """Scalable candidates sharing one key resource in one group (Alg. 1 line 5)."""

    members: list[Candidate]
    arrangement: PrefixArrangement
    # release times (relative to now) of the key units held by running and other admitted
    # actions in the group: the per-unit completion profile before this split starts
    held: list[float]
    free_units: int  # key units the split's members may share (the DP's capacity)
    rest: list[Waiting]
    rest_demands: list[Demand]
    rest_single: bool  # every rest action needs one unit
    price: float  # holding_price for this split
    # each member's demand as a remaining action (``_demand``), and whether every member from
    # index i on needs one unit: read by every trial that evicts them
    member_demands: list[Demand]
    members_single_from: list[bool]


class ElasticAllocation:
    """One pass's elastic allocation over its admitted candidates."""

    def __init__(
        self,
        *,
        sizing: UnitSizing,
        topology: Topology,
        accommodation: Accommodation,
        held: Mapping[Hashable, HeldUnits],
        now: float,
        unread: int = 0,
        rest_model: str = "efficient",
    ) -> None:
        self.sizing = sizing
        self.topology = topology
        self.accommodation = accommodation
        self.held = held  # per group: the units its running actions hold
        self.now = now
        self.unread = unread  # waiting actions beyond the estimate window (counted, not read)
        self.rest_model = rest_model  # how Alg. 2 estimates the remaining actions: REST_MODELS
        self.trials = 0  # objectives evaluated (Alg. 1 line 10): what a pass's time grows with

    def allocate(
        self,
        candidates: list[Candidate],
        leftovers: list[tuple[Waiting, Hashable | None]],
        reasons: dict[str, str],
    ) -> None:
        """Widen the kept candidates' key units in place; the evicted get ``DEFERRED``."""
        sizing = self.sizing
        splits: dict[tuple[Hashable, str], list[Candidate]] = {}
        for cand in candidates:
            resource = self._split_resource(cand.entry.spec)
            if resource is not None:
                cand.split_key = resource
                splits.setdefault((cand.group, resource), []).append(cand)
        for (group, key), members in splits.items():
            if not any(sizing.is_elastic(c.entry.spec) for c in members):
                continue  # Alg. 1 lines 6-7: all keep their minimum units
            member_ids = {id(c) for c in members}
            others = [c for c in candidates if id(c) not in member_ids]
            operator = self.accommodation.dp_operator(
                group, key, [(c.entry.spec, c.units) for c in others]
            )
            held = sorted(self._held_units(group, key, others))  # one run for each trial's sort
            rest = [
                entry
                for entry, entry_group in leftovers
                if (entry_group is None or entry_group == group) and _uses(entry.spec, key)
            ]
            if any(c.entry.spec.service is not None for c in members):
                price = 0.0  # GPU services are not priced: see holding_price
            else:
                running = len(self.held.get(group, ()))
                sharing = running + len(members) + len(rest) + self.unread - 1
                price = holding_price(sharing, len(held) + operator.free_units)
            costs = [self._cost_table(c, key, operator.table_width, price) for c in members]
            arrangement = operator.arrange_prefixes(costs)
            rest_demands = self._demands(rest, price)
            member_demands = self._demands([c.entry for c in members], price)
            single_from = [True] * (len(members) + 1)
            for index in range(len(members) - 1, -1, -1):
                single_from[index] = single_from[index + 1] and member_demands[index][0] <= 1
            split = _Split(
                members,
                arrangement,
                held,
                operator.free_units,
                rest,
                rest_demands,
                all(units <= 1 for units, _ in rest_demands),
                price,
                member_demands,
                single_from,
            )
            # Evicting the whole split is allowed only while something in the group is running
            # or starting; the kept set is always an FCFS prefix, so a deferred head holds back
            # everything behind it in its group and gets the units that completions free.
            last = len(members) if held else len(members) - 1
            kept = self._best_prefix(split, last)
            allocation = arrangement.allocation(kept)
            for cand, units in zip(members[:kept], allocation, strict=True):
                cand.units[key] = units
            for cand in members[kept:]:
                reasons[cand.entry.spec.action_id] = DEFERRED

    def _best_prefix(self, split: _Split, last: int) -> int:
        """How many members to keep: Alg. 1 lines 9-12, evict from the tail while the
        objective improves (at most ``last``)."""
        count = len(split.members)
        kept = count
        best = self._objective(split, count)
        for evict in range(1, last + 1):
            trial = self._objective(split, count - evict, best)
            if trial >= best:
                break
            best = trial
            kept = count - evict
        return kept

    def _split_resource(self, spec: ActionSpec) -> str | None:
        """The resource an action is grouped by in Alg. 1 line 5: its key elasticity resource,
        or for a non-elastic action the first resource it uses that the topology arranges."""
        if spec.key_resource is not None:
            return spec.key_resource
        return next((r for r in self.topology.arranged_resources if r in spec.resources), None)

    def _cost_table(
        self, cand: Candidate, key: str, table_width: int, price: float
    ) -> NDArray[np.float64]:
        """``T(k)`` over the feasible ``k`` (inf elsewhere) plus any restore the topology
        reports (Alg. 3's operator-supplied GetDuration: only an action naming a GPU service
        restores one, §5.3), plus the holding charge; non-elastic: only its own units."""
        sizing = self.sizing
        spec = cand.entry.spec
        if not sizing.is_elastic(spec):
            units = cand.units.get(key, 0)
            table = np.full(units + 1, np.inf)
            table[units] = sizing.waiting_demand(cand.entry)[1]
            cand.durations = cand.costs = table
            return table
        shape = sizing.cost_shape(spec, table_width)
        t1 = sizing.t1(spec)
        cand.durations = t1 * shape.inverse_speedup + shape.mask
        if spec.service is not None:
            for u in shape.options:
                cand.durations[u] += self.accommodation.restore_seconds(spec, u)
        cand.costs = cand.durations
        if price > 0.0:
            # unit-seconds beyond the action's work at its least units (see holding_price)
            cand.costs = cand.durations + (price * t1) * shape.wasted_work()
        return cand.costs

    def _priced(self, entry: Waiting, price: float) -> list[Option]:
        """Alg. 2's explored allocations of the first remaining action, each with the holding
        charge DPArrange would add (so deferring never looks cheaper only for being unpriced)."""
        options, floor = self.sizing.explored(entry)
        if price <= 0.0 or len(options) == 1:
            return [(units, seconds, 0.0) for units, seconds in options]
        return [
            (units, seconds, price * max(0.0, units * seconds - floor))
            for units, seconds in options
        ]

    def _demands(self, entries: list[Waiting], price: float) -> list[Demand]:
        """The units and seconds Alg. 2's estimate places each remaining action at: its minimum
        (the paper) or, in a priced split under the "efficient" model, the allocation the
        holding price would give it (``sizing.UnitSizing.efficient_demand``)."""
        if price > 0.0 and self.rest_model == "efficient":
            return self.sizing.efficient_demands(entries, price)
        return [self.sizing.waiting_demand(entry) for entry in entries]

    def _held_units(self, group: Hashable, key: str, others: list[Candidate]) -> list[float]:
        """Release times of the ``key`` units that running actions and the other admitted
        candidates of ``group`` hold, one entry per unit (the per-unit profile, ``objective``)."""
        running = self.held.get(group)
        held = [] if running is None else running.release_times(key, self.now)
        for cand in others:
            count = cand.units.get(key, 0)
            if count and cand.group == group:
                held.extend([self.sizing.waiting_demand(cand.entry)[1]] * count)
        return held

    def _objective(self, split: _Split, prefix: int, limit: float = math.inf) -> float:
        """Alg. 2 for the candidate prefix ``split.members[:prefix]``; the rest wait. Only
        whether it is below ``limit`` matters (inf once it cannot be)."""
        self.trials += 1
        alloc = split.arrangement.allocation(prefix)
        ends: list[float] = []
        if alloc:
            kept = split.members[: len(alloc)]
            ends = [member.duration_at(units) for member, units in zip(kept, alloc, strict=True)]
        # Units this pass leaves free are released at the next pass, which runs at the next
        # completion: Alg. 2's heap holds completions only, so a remaining action never starts
        # before one (a deferral must not look free because units sit idle now).
        idle = max(0, split.free_units - sum(alloc))
        next_pass = min(split.held[0] if split.held else math.inf, min(ends, default=math.inf))
        profile = [0.0 if next_pass == math.inf else next_pass] * idle + split.held
        for end, units in zip(ends, alloc, strict=True):
            profile += [end] * units  # one entry per unit: a few candidates, no array needed
        first: list[Option] = []
        later: list[Demand] = []
        single = split.rest_single
        if prefix < len(split.members):
            first = self._priced(split.members[prefix].entry, split.price)
            single = single and split.members_single_from[prefix + 1]
            later = split.member_demands[prefix + 1 :] + split.rest_demands
        elif split.rest:
            first = self._priced(split.rest[0], split.price)
            later = split.rest_demands[1:]
        return approximated_objective(
            split.arrangement.best_cost(prefix), profile, first, later, single, limit
        )


def holding_price(others: int, capacity: int) -> float:
    """What DPArrange charges per unit-second an allocation wastes (Loom's own, not the paper's).

    DPArrange minimises the candidates' own durations, so a lone candidate always gets every
    free unit, even at DoP 32 where E(32) is near 0.4, and the actions that arrive while it
    holds them queue (the Alg. 2 estimate sees only actions already waiting, and only
    ``estimate_window`` of them). On ``capacity`` work-conserving units shared with ``others``
    actions, each unit-second one action holds is taken from the others at ``1/capacity`` each:
    their completion times grow by ``others / capacity`` seconds per unit-second. ``others``
    counts every waiting action the group could serve (read by the estimate or not) and the
    group's running actions, which stand in for the arrivals to come while the units are held
    (by Little's law, about as many arrive during one sojourn as are in the system). The
    charge applies only to the unit-seconds beyond the action's work at its least units
    (``k·T(k) − m·T(m)``: the parallel inefficiency), so an action that scales perfectly is
    never held back.

    Not for GPU services (§5.3): there a narrower allocation is another service instance to
    restore, which evicts other services' cached copies; the price sees none of that and, in
    ``tangram_gpu``, multiplied the restores of a congested pool. Their splits are not priced.
    """
    return max(0, others) / capacity if capacity > 0 else 0.0


def _uses(spec: ActionSpec, resource: str) -> bool:
    return resource in spec.resources
