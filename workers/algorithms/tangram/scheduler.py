"""Elastic action scheduling (arl-tangram §4.2, Algorithm 1).

Each pass: (1) candidates = the FCFS prefix that the topology can hold at minimum units
(``accommodate``; a CPU node blocked by its head closes only that node, anything else stops the
scan); (2) candidates that are not scalable (unknown elasticity or duration, or one feasible
amount) keep their minimum units; (3) the scalable ones are split by (group, key resource) and,
per split, greedily evicted from the tail while the approximated objective (Alg. 2) improves,
with DPArrange (Alg. 3/4) giving the exact allocation of every candidate prefix in one DP.

Deviations, each for a stated reason:
- a split may be evicted entirely (Alg. 1 lets ``t`` reach ``|C_j|``) only while something in
  its group is running or starting, else the estimate would wait for a completion that never
  comes; since the kept set is a prefix, the head cannot starve;
- the estimate reads at most ``estimate_window`` remaining actions (``None`` = the whole queue,
  as in the paper) so that a pass stays O(window · log heap) at 4 096 waiting actions;
- DPArrange's GetDuration (Alg. 3 line 17, supplied by the topology's operator) adds the
  restore time when no free GPU chunk caches the service at that DoP (§5.3's EOE cost);
- a split is keyed by (group, resource): a CPU node is scheduled on its own (§5.2). Non-elastic
  actions join the split of the resource they use (their single option in the DP), so the
  tail eviction can hold them back to widen an elastic action ahead of them.

Policies (``algorithm``, ``depth``, DoP bounds, ``fixed_dop``) can be changed on a live object:
"elastic" is Algorithm 1, "fcfs-min" gives every action its minimum units, "fixed-dop" gives
every scalable action ``fixed_dop`` units (the paper's DoP=4 / DoP=16 baselines).

DoP bounds (Loom's rule where the paper is silent): ``min_dop``/``max_dop`` narrow a scalable
action's feasible key units (§4.1's "priors to narrow the search space"), after the topology
has dropped the counts it could never give one action (``Topology.unit_counts``) and lowered
``min_dop`` to what every group can give (``Topology.min_dop_cap``). Admission
(Alg. 1 line 3) reserves the *smallest count of that narrowed set* and DPArrange chooses only
among that same set, so the all-at-minimum arrangement admission found is always one the DP can
return: no policy can leave a prefix that "cannot be arranged". Where the bounds exclude every
feasible count they yield to the demand (``action.bounded_options``); bounds never apply to
non-scalable actions, which keep their minimum units (§4.2).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from workers.algorithms.tangram.action import ActionSpec, ResourceDemand, bounded_options
from workers.algorithms.tangram.dparrange import PrefixArrangement
from workers.algorithms.tangram.history import DurationHistory
from workers.algorithms.tangram.objective import approximated_objective
from workers.algorithms.tangram.policy import ALGORITHMS
from workers.algorithms.tangram.topology.base import (
    Accommodation,
    Allocation,
    Blocked,
    Topology,
    WaitReason,
)

DEFERRED = "deferred by elastic eviction"
BEHIND = "queued behind earlier actions"


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
class _Waiting:
    spec: ActionSpec
    submitted_at: float


@dataclass
class _Running:
    spec: ActionSpec
    submitted_at: float
    assignment: Assignment
    group: Hashable
    expected_end: float


@dataclass
class _Candidate:
    entry: _Waiting
    group: Hashable
    units: dict[str, int]
    split_key: str | None = None
    costs: NDArray[np.float64] | None = field(default=None, repr=False)

    def cost_at(self, units: int) -> float:
        assert self.costs is not None
        return float(self.costs[units])


@dataclass
class _Split:
    """Scalable candidates sharing one key resource in one group (Alg. 1 line 5)."""

    members: list[_Candidate]
    arrangement: PrefixArrangement
    base_heap: list[float]
    rest: list[_Waiting]
    rest_durations: list[float]


class ElasticScheduler:
    """One FCFS waiting queue over one topology (one resource pool)."""

    def __init__(
        self,
        topology: Topology,
        *,
        depth: int = 2,
        algorithm: str = "elastic",
        min_dop: int | None = None,
        max_dop: int | None = None,
        fixed_dop: int = 4,
        estimate_window: int | None = 128,
        history: DurationHistory | None = None,
    ) -> None:
        self.topology = topology
        self.history = history if history is not None else DurationHistory()
        self._waiting: dict[str, _Waiting] = {}
        self._running: dict[str, _Running] = {}
        self._running_by_group: dict[Hashable, dict[str, float]] = {}
        self._wait_reasons: dict[str, str] = {}
        # Each distinct key demand's options under the policy, for one pass (the topology may
        # gain nodes or change limits between passes).
        self._options_memo: dict[tuple[str, ResourceDemand], tuple[int, ...]] = {}
        self.passes = 0
        self.depth = 2
        self.algorithm = "elastic"
        self.min_dop: int | None = None
        self.max_dop: int | None = None
        self.fixed_dop = 4
        self.estimate_window: int | None = 128
        self.set_policy(
            depth=depth,
            algorithm=algorithm,
            min_dop=min_dop,
            max_dop=max_dop,
            fixed_dop=fixed_dop,
            estimate_window=estimate_window,
        )

    # --- policy -----------------------------------------------------------------------------

    def set_policy(self, **changes: Any) -> None:
        """Change policies live: depth, algorithm, min_dop, max_dop, fixed_dop, estimate_window.

        Raises ValueError naming the field on a bad value; nothing changes then.
        """
        allowed = {
            "depth",
            "algorithm",
            "min_dop",
            "max_dop",
            "fixed_dop",
            "estimate_window",
        }
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"unknown policy field(s): {', '.join(sorted(unknown))}")
        merged = {name: getattr(self, name) for name in allowed} | changes
        if not _is_int(merged["depth"]) or merged["depth"] < 1:
            raise ValueError(f"depth: must be an integer >= 1, got {merged['depth']!r}")
        if not isinstance(merged["algorithm"], str) or merged["algorithm"] not in ALGORITHMS:
            raise ValueError(f"algorithm: must be one of {ALGORITHMS}, got {merged['algorithm']!r}")
        for name in ("min_dop", "max_dop"):
            value = merged[name]
            if value is not None and (not _is_int(value) or value < 1):
                raise ValueError(f"{name}: must be None or an integer >= 1, got {value!r}")
        if (
            merged["min_dop"] is not None
            and merged["max_dop"] is not None
            and merged["min_dop"] > merged["max_dop"]
        ):
            raise ValueError("min_dop: must not exceed max_dop")
        if not _is_int(merged["fixed_dop"]) or merged["fixed_dop"] < 1:
            raise ValueError(f"fixed_dop: must be an integer >= 1, got {merged['fixed_dop']!r}")
        window = merged["estimate_window"]
        if window is not None and (not _is_int(window) or window < 0):
            raise ValueError(f"estimate_window: must be None or an integer >= 0, got {window!r}")
        for name, value in merged.items():
            setattr(self, name, value)
        self._options_memo.clear()

    def policy(self) -> dict[str, object]:
        return {
            "algorithm": self.algorithm,
            "depth": self.depth,
            "min_dop": self.min_dop,
            "max_dop": self.max_dop,
            "fixed_dop": self.fixed_dop,
            "estimate_window": self.estimate_window,
        }

    # --- queue operations -------------------------------------------------------------------

    def submit(self, spec: ActionSpec, now: float) -> None:
        """Queue an action; a demand the pool can never meet is rejected with the reason."""
        if spec.action_id in self._waiting or spec.action_id in self._running:
            raise ValueError(f"action {spec.action_id!r} already submitted")
        reason = self.topology.never_fits(spec)
        if reason is not None:
            raise ValueError(f"action {spec.action_id!r}: {reason.value}")
        self._waiting[spec.action_id] = _Waiting(spec=spec, submitted_at=now)

    def cancel(self, action_id: str, now: float = 0.0) -> bool:
        """Drop a waiting action, or stop a running one and free its units. False if unknown."""
        if self._waiting.pop(action_id, None) is not None:
            self._wait_reasons.pop(action_id, None)
            return True
        running = self._running.pop(action_id, None)
        if running is None:
            return False
        self._running_by_group.get(running.group, {}).pop(action_id, None)
        self.topology.release(action_id, now)
        return True

    def complete(self, action_id: str, now: float) -> CompletedAction:
        """An action finished: free its units, learn its duration for the history average."""
        running = self._running.pop(action_id, None)
        if running is None:
            raise KeyError(f"action {action_id!r} is not running")
        self._running_by_group.get(running.group, {}).pop(action_id, None)
        self.topology.release(action_id, now)
        assignment = running.assignment
        spec = running.spec
        executed = now - assignment.started_at - assignment.load_seconds
        key_units = assignment.units.get(spec.key_resource, 1) if spec.key_resource else 1
        self.history.record(spec, key_units, executed)
        return CompletedAction(
            action_id=action_id,
            submitted_at=running.submitted_at,
            started_at=assignment.started_at,
            finished_at=now,
            dop=assignment.dop,
        )

    def end_trajectory(self, trajectory_id: str, now: float) -> None:
        self.topology.end_trajectory(trajectory_id, now)

    # --- introspection ----------------------------------------------------------------------

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    @property
    def running_count(self) -> int:
        return len(self._running)

    def waiting_ids(self) -> list[str]:
        return list(self._waiting)

    def running(self) -> dict[str, Assignment]:
        return {a: r.assignment for a, r in self._running.items()}

    def holdings(self) -> dict[str, dict[str, object]]:
        return self.topology.holdings()

    def wait_reason(self, action_id: str) -> str | None:
        """Why a waiting action was not scheduled in the last pass (None if not waiting)."""
        if action_id not in self._waiting:
            return None
        return self._wait_reasons.get(action_id, BEHIND)

    def head_wait_reason(self) -> str | None:
        head = next(iter(self._waiting), None)
        return None if head is None else self.wait_reason(head)

    def next_wakeup(self, now: float) -> float | None:
        """When a pass could schedule something without an arrival or completion (quota)."""
        return self.topology.next_change(now) if self._waiting else None

    def snapshot(self) -> dict[str, object]:
        return {
            "policy": self.policy(),
            "waiting": self.waiting_count,
            "running": self.running_count,
            "head_wait_reason": self.head_wait_reason(),
            "holdings": self.holdings(),
            "passes": self.passes,
        }

    # --- the pass ---------------------------------------------------------------------------

    def _t1(self, spec: ActionSpec) -> float:
        return self.history.t1(spec)

    def _options(self, spec: ActionSpec) -> tuple[int, ...]:
        """The key units a scalable action may get: what the topology can give one action,
        narrowed by the DoP bounds (see the module docstring); never empty."""
        key = spec.key_resource
        assert key is not None
        demand = spec.resources[key]
        memo_key = (key, demand)
        options = self._options_memo.get(memo_key)
        if options is None:
            feasible = demand.options()
            usable = self.topology.unit_counts(key, feasible) or feasible
            low, cap = self.min_dop, self.topology.min_dop_cap(key)
            if low is not None and cap is not None:
                low = min(low, cap)
            options = bounded_options(usable, low, self.max_dop)
            self._options_memo[memo_key] = options
        return options

    def _least_key_units(self, spec: ActionSpec) -> int:
        """The key units admission reserves: the smallest option under the policy.

        Equal to the demand's minimum unless ``min_dop`` lies above it (the minimum is always
        a count the topology can give: ``submit`` checked ``never_fits``), which keeps the
        common case free of the options lookup.
        """
        key = spec.key_resource
        assert key is not None
        minimum = spec.resources[key].minimum
        if self.min_dop is None or self.min_dop <= minimum or not spec.scalable:
            return minimum
        return self._options(spec)[0]

    def _request_units(self, spec: ActionSpec) -> dict[str, int]:
        units = spec.min_units()
        key = spec.key_resource
        if key is None or not spec.scalable:
            return units
        if self.algorithm == "fixed-dop":
            options = self._options(spec)
            fitting = [u for u in options if u <= self.fixed_dop]
            units[key] = fitting[-1] if fitting else options[0]
        else:
            units[key] = self._least_key_units(spec)
        return units

    def _min_duration(self, spec: ActionSpec) -> float:
        """Duration at the units admission would reserve (Alg. 2's "minimum resources")."""
        key = spec.key_resource
        units = self._least_key_units(spec) if key else 1
        return spec.duration(units, self._t1(spec))

    def _first_options(self, spec: ActionSpec) -> list[float]:
        if self.algorithm != "elastic" or not spec.scalable:
            return [self._min_duration(spec)]
        t1 = self._t1(spec)
        return [spec.duration(u, t1) for u in self._options(spec)[: self.depth]]

    def schedule(self, now: float) -> list[Assignment]:
        """One pass of Algorithm 1; returns the actions to start now with their units."""
        self.passes += 1
        if not self._waiting:
            return []
        self._options_memo.clear()
        accommodation = self.topology.accommodation(now)
        candidates: list[_Candidate] = []
        leftovers: list[tuple[_Waiting, Hashable | None]] = []
        window = self.estimate_window
        reasons: dict[str, str] = {}
        queue: Iterator[_Waiting] = iter(self._waiting.values())  # not mutated until _start
        for entry in queue:
            units = self._request_units(entry.spec)
            outcome = accommodation.add(entry.spec, units)
            if isinstance(outcome, Blocked):
                reasons[entry.spec.action_id] = outcome.reason.value
                leftovers.append((entry, outcome.group))
                if outcome.group is None or accommodation.all_groups_closed():
                    break
                continue
            candidates.append(_Candidate(entry, outcome.group, units))
        if window is None or len(leftovers) < window:
            for entry in queue:
                leftovers.append((entry, None))
                if window is not None and len(leftovers) >= window:
                    break
        if self.algorithm == "elastic":
            self._elastic_allocate(candidates, leftovers, accommodation, now, reasons)
        selected = [c for c in candidates if c.entry.spec.action_id not in reasons]
        self._wait_reasons = reasons
        # Candidates outside every split first, then split members in FCFS order: the order
        # DPArrange assumed.
        selected.sort(key=lambda c: c.split_key is not None)
        return [self._start(c, now) for c in selected]

    def _split_resource(self, spec: ActionSpec) -> str | None:
        """The resource an action is grouped by in Alg. 1 line 5: its key elasticity resource,
        or for a non-elastic action the first resource it uses that the topology arranges."""
        if spec.key_resource is not None:
            return spec.key_resource
        return next((r for r in self.topology.arranged_resources if r in spec.resources), None)

    def _elastic_allocate(
        self,
        candidates: list[_Candidate],
        leftovers: list[tuple[_Waiting, Hashable | None]],
        accommodation: Accommodation,
        now: float,
        reasons: dict[str, str],
    ) -> None:
        splits: dict[tuple[Hashable, str], list[_Candidate]] = {}
        for cand in candidates:
            resource = self._split_resource(cand.entry.spec)
            if resource is not None:
                cand.split_key = resource
                splits.setdefault((cand.group, resource), []).append(cand)
        for (group, key), members in splits.items():
            if not any(self._is_elastic(c.entry.spec) for c in members):
                continue  # Alg. 1 lines 6-7: all keep their minimum units
            member_ids = {id(c) for c in members}
            others = [c for c in candidates if id(c) not in member_ids]
            operator = accommodation.dp_operator(
                group, key, [(c.entry.spec, c.units) for c in others]
            )
            free_units = _free_units_hint(operator)
            costs = [self._cost_table(c, key, free_units, accommodation) for c in members]
            arrangement = operator.arrange_prefixes(costs)
            base_heap = [
                max(0.0, end - now) for end in self._running_by_group.get(group, {}).values()
            ]
            base_heap.extend(self._min_duration(c.entry.spec) for c in others if c.group == group)
            rest = [e for e, g in leftovers if (g is None or g == group) and _uses(e.spec, key)]
            rest_durations = [self._min_duration(e.spec) for e in rest]
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

    def _is_elastic(self, spec: ActionSpec) -> bool:
        return spec.scalable and len(self._options(spec)) > 1

    def _cost_table(
        self, cand: _Candidate, key: str, free_units: int, accommodation: Accommodation
    ) -> NDArray[np.float64]:
        """``T(k)`` over the feasible ``k`` (inf elsewhere) plus any restore the topology
        reports (Alg. 3's operator-supplied GetDuration); non-elastic: only its own units."""
        spec = cand.entry.spec
        if self._is_elastic(spec):
            options = [u for u in self._options(spec) if u <= free_units] or [
                self._options(spec)[0]
            ]
            table = spec.duration_table(max(options), self._t1(spec))
            for u in options:
                table[u] += accommodation.restore_seconds(spec, u)
        else:
            options = [cand.units.get(key, 0)]
            table = np.full(options[0] + 1, self._min_duration(spec))
        mask = np.full(table.shape, np.inf)
        mask[options] = 0.0
        cand.costs = table + mask
        return cand.costs

    def _objective(self, split: _Split, prefix: int) -> float:
        """Alg. 2 for the candidate prefix ``split.members[:prefix]``; the rest wait."""
        alloc = split.arrangement.allocation(prefix)
        chosen = [float(split.members[i].cost_at(k)) for i, k in enumerate(alloc)]
        evicted = [m.entry.spec for m in split.members[prefix:]]
        first: list[float] = []
        later: list[float] = []
        if evicted:
            first = self._first_options(evicted[0])
            later = [self._min_duration(s) for s in evicted[1:]] + split.rest_durations
        elif split.rest:
            first = self._first_options(split.rest[0].spec)
            later = split.rest_durations[1:]
        return approximated_objective(
            split.arrangement.best_cost(prefix), split.base_heap, chosen, first, later, self.depth
        )

    def restore(
        self,
        spec: ActionSpec,
        *,
        node: str,
        units: Mapping[str, int],
        core_ids: tuple[int, ...],
        submitted_at: float,
        now: float,
    ) -> Assignment:
        """Re-adopt an action that was running before a restart, on the units it holds."""
        if spec.action_id in self._waiting or spec.action_id in self._running:
            raise ValueError(f"action {spec.action_id!r} already submitted")
        allocation = self.topology.restore(spec, node, units, core_ids, now)
        entry = _Waiting(spec=spec, submitted_at=submitted_at)
        self._waiting[spec.action_id] = entry
        return self._adopt(entry, allocation.node, allocation, now)

    def _start(self, cand: _Candidate, now: float) -> Assignment:
        spec = cand.entry.spec
        allocation: Allocation = self.topology.allocate(spec, cand.group, cand.units, now)
        return self._adopt(cand.entry, cand.group, allocation, now)

    def _adopt(
        self, entry: _Waiting, group: Hashable, allocation: Allocation, now: float
    ) -> Assignment:
        spec = entry.spec
        key = spec.key_resource
        key_units = allocation.units.get(key, 1) if key else 1
        expected = spec.duration(key_units, self._t1(spec))
        assignment = Assignment(
            action_id=spec.action_id,
            node=allocation.node,
            units=dict(allocation.units),
            core_ids=allocation.core_ids,
            gpu_ids=allocation.gpu_ids,
            quota_units={k: v for k, v in allocation.units.items() if k.startswith("api:")},
            dop=allocation.dop,
            expected_seconds=expected,
            load_seconds=allocation.load_seconds,
            started_at=now,
        )
        del self._waiting[spec.action_id]
        end = now + allocation.load_seconds + expected
        self._running[spec.action_id] = _Running(
            spec=spec,
            submitted_at=entry.submitted_at,
            assignment=assignment,
            group=group,
            expected_end=end,
        )
        self._running_by_group.setdefault(group, {})[spec.action_id] = end
        return assignment


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _uses(spec: ActionSpec, resource: str) -> bool:
    return resource in spec.resources


def _free_units_hint(operator: object) -> int:
    """Largest unit count worth tabulating: the operator's free units (or every GPU)."""
    free = getattr(operator, "free_units", None)
    if free is not None:
        return int(free)
    bounds = getattr(operator, "bounds", None)
    return int(bounds[0]) if bounds is not None else 1 << 16


__all__ = [
    "ALGORITHMS",
    "Assignment",
    "CompletedAction",
    "ElasticScheduler",
    "WaitReason",
]
