"""The elastic part of a pass: split, cost, evict from the tail (arl-tangram §4.2, Alg. 1 l. 5–12).

The admitted candidates are split by (group, key resource); per split that holds an elastic
action, the tail is greedily evicted while the approximated objective (Alg. 2) improves, with
DPArrange (Alg. 3/4) giving the exact allocation of every candidate prefix in one DP.

Deviations, each for a stated reason:
- a split may be evicted entirely (Alg. 1 lets ``t`` reach ``|C_j|``) only while something in
  its group is running or starting, else the estimate would wait for a completion that never
  comes; since the kept set is a prefix, the head cannot starve;
- DPArrange's GetDuration (Alg. 3 line 17, supplied by the topology's operator) adds the
  restore time when no free GPU chunk caches the service at that DoP (§5.3's EOE cost);
- a split is keyed by (group, resource): a CPU node is scheduled on its own (§5.2). Non-elastic
  actions join the split of the resource they use (their single option in the DP), so the
  tail eviction can hold them back to widen an elastic action ahead of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.dparrange import PrefixArrangement
from workers.algorithms.tangram.entries import Candidate, Waiting
from workers.algorithms.tangram.objective import approximated_objective
from workers.algorithms.tangram.sizing import UnitSizing
from workers.algorithms.tangram.topology.base import Accommodation, Topology

DEFERRED = "deferred by elastic eviction"


@dataclass
class _Split:
    """Scalable candidates sharing one key resource in one group (Alg. 1 line 5)."""

    members: list[Candidate]
    arrangement: PrefixArrangement
    base_heap: list[float]
    rest: list[Waiting]
    rest_durations: list[float]


class ElasticAllocation:
    """One pass's elastic allocation over its admitted candidates."""

    def __init__(
        self,
        *,
        sizing: UnitSizing,
        topology: Topology,
        accommodation: Accommodation,
        running_ends: Mapping[Hashable, Mapping[str, float]],
        now: float,
    ) -> None:
        self.sizing = sizing
        self.topology = topology
        self.accommodation = accommodation
        self.running_ends = running_ends  # per group: the expected end of each running action
        self.now = now

    def allocate(
        self,
        candidates: list[Candidate],
        leftovers: list[tuple[Waiting, Hashable | None]],
        reasons: dict[str, str],
    ) -> None:
        """Widen the kept candidates' key units in place; the evicted get ``DEFERRED``."""
        sizing, now = self.sizing, self.now
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
            free_units = _free_units_hint(operator)
            costs = [self._cost_table(c, key, free_units) for c in members]
            arrangement = operator.arrange_prefixes(costs)
            base_heap = [max(0.0, end - now) for end in self.running_ends.get(group, {}).values()]
            base_heap.extend(sizing.min_duration(c.entry.spec) for c in others if c.group == group)
            rest = [
                entry
                for entry, entry_group in leftovers
                if (entry_group is None or entry_group == group) and _uses(entry.spec, key)
            ]
            rest_durations = [sizing.min_duration(entry.spec) for entry in rest]
            split = _Split(members, arrangement, base_heap, rest, rest_durations)
            count = len(members)
            kept = count
            best = self._objective(split, count)
            # Alg. 1 lines 9-12: evict from the tail while the objective improves. Evicting the
            # whole split is allowed only while something in the group is running or starting;
            # the kept set is always an FCFS prefix, so a deferred head holds back everything
            # behind it in its group and gets the units that completions free.
            last = count if base_heap else count - 1
            for evict in range(1, last + 1):
                trial = self._objective(split, count - evict)
                if trial >= best:
                    break
                best = trial
                kept = count - evict
            allocation = arrangement.allocation(kept)
            for cand, units in zip(members[:kept], allocation, strict=True):
                cand.units[key] = units
            for cand in members[kept:]:
                reasons[cand.entry.spec.action_id] = DEFERRED

    def _split_resource(self, spec: ActionSpec) -> str | None:
        """The resource an action is grouped by in Alg. 1 line 5: its key elasticity resource,
        or for a non-elastic action the first resource it uses that the topology arranges."""
        if spec.key_resource is not None:
            return spec.key_resource
        return next((r for r in self.topology.arranged_resources if r in spec.resources), None)

    def _cost_table(self, cand: Candidate, key: str, free_units: int) -> NDArray[np.float64]:
        """``T(k)`` over the feasible ``k`` (inf elsewhere) plus any restore the topology
        reports (Alg. 3's operator-supplied GetDuration); non-elastic: only its own units."""
        sizing = self.sizing
        spec = cand.entry.spec
        if sizing.is_elastic(spec):
            options = [u for u in sizing.options(spec) if u <= free_units] or [
                sizing.options(spec)[0]
            ]
            table = spec.duration_table(max(options), sizing.t1(spec))
            for u in options:
                table[u] += self.accommodation.restore_seconds(spec, u)
        else:
            options = [cand.units.get(key, 0)]
            table = np.full(options[0] + 1, sizing.min_duration(spec))
        mask = np.full(table.shape, np.inf)
        mask[options] = 0.0
        cand.costs = table + mask
        return cand.costs

    def _objective(self, split: _Split, prefix: int) -> float:
        """Alg. 2 for the candidate prefix ``split.members[:prefix]``; the rest wait."""
        sizing = self.sizing
        alloc = split.arrangement.allocation(prefix)
        chosen = [float(split.members[index].cost_at(units)) for index, units in enumerate(alloc)]
        evicted = [m.entry.spec for m in split.members[prefix:]]
        first: list[float] = []
        later: list[float] = []
        if evicted:
            first = sizing.first_options(evicted[0])
            later = [sizing.min_duration(s) for s in evicted[1:]] + split.rest_durations
        elif split.rest:
            first = sizing.first_options(split.rest[0].spec)
            later = split.rest_durations[1:]
        return approximated_objective(
            split.arrangement.best_cost(prefix),
            split.base_heap,
            chosen,
            first,
            later,
            sizing.policy.depth,
        )


def _uses(spec: ActionSpec, resource: str) -> bool:
    return resource in spec.resources


def _free_units_hint(operator: object) -> int:
    """Largest unit count worth tabulating: the operator's free units (or every GPU)."""
    free = getattr(operator, "free_units", None)
    if free is not None:
        return int(free)
    bounds = getattr(operator, "bounds", None)
    return int(bounds[0]) if bounds is not None else 1 << 16
