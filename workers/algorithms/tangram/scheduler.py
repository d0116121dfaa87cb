"""Elastic action scheduling (arl-tangram §4.2, Algorithm 1).

Each pass: (1) candidates = the FCFS prefix that the topology can hold at minimum units
(``accommodate``; a CPU node blocked by its head closes only that node, anything else stops the
scan); (2) candidates that are not scalable (unknown elasticity or duration, or one feasible
amount) keep their minimum units; (3) the scalable ones are split by (group, key resource) and,
per split, greedily evicted from the tail while the approximated objective (Alg. 2) improves,
with DPArrange (Alg. 3/4) giving the exact allocation of every candidate prefix in one DP.

This module admits the candidates (step 1) and starts what the pass keeps; ``sizing`` gives the
units an action may get under the policy (the DoP bounds), ``eviction`` steps 2 and 3 with their
deviations from the paper. One more deviation, here: the estimate reads at most
``estimate_window`` remaining actions (``None`` = the whole queue, as in the paper) so that a
pass stays O(window · log heap) at 4 096 waiting actions.

A topology may set a per-pass floor on an elastic action's key units from the running actions
and the queue head (``Topology.dop_floors``; the GPU pool's memory-derived floor), applied like
``min_dop`` under the "elastic" algorithm only.

``rest_model`` (a constructor argument, set by a scheduler service's ``ServiceConfig``) chooses
how Alg. 2 estimates the remaining actions: "efficient" (Loom's own, the default) or "minimum"
(the paper's); see ``objective``. ``candidate_cap`` comes from the same configuration.

Policies (``algorithm``, ``depth``, DoP bounds, ``fixed_dop``) can be changed on a live object:
"elastic" is Algorithm 1, "fcfs-min" gives every action its minimum units, "fixed-dop" gives
every scalable action ``fixed_dop`` units (the paper's DoP=4 / DoP=16 baselines).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from itertools import islice
from typing import Any

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.entries import (
    Assignment,
    Candidate,
    CompletedAction,
    Running,
    Waiting,
)
from workers.algorithms.tangram.eviction import REST_MODELS, ElasticAllocation
from workers.algorithms.tangram.held import HeldUnits
from workers.algorithms.tangram.history import DurationHistory
from workers.algorithms.tangram.policy import ALGORITHMS
from workers.algorithms.tangram.sizing import UnitSizing
from workers.algorithms.tangram.topology.base import Allocation, Blocked, Topology, WaitReason

BEHIND = "queued behind earlier actions"
# Candidates one pass admits (Loom's own): a burst's pass arranges this many, starts what it
# keeps and asks for a follow-up pass at once (``next_wakeup``), instead of one long pass.
DEFAULT_CANDIDATE_CAP = 32
# Remaining actions the Alg. 2 estimate reads per pass. Was 128; lowered to 64 for the pass-time
# target after the per-unit estimate made each read dearer (bench scheduler_pass reports both).
DEFAULT_ESTIMATE_WINDOW = 64


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
        estimate_window: int | None = DEFAULT_ESTIMATE_WINDOW,
        history: DurationHistory | None = None,
        rest_model: str = "efficient",
        candidate_cap: int | None = DEFAULT_CANDIDATE_CAP,
    ) -> None:
        pass_settings_check(rest_model=rest_model, candidate_cap=candidate_cap)
        self.rest_model = rest_model
        self.candidate_cap = candidate_cap
        self._follow_up = False  # the last pass stopped at the cap after starting something
        self.topology = topology
        self.history = history if history is not None else DurationHistory()
        self._waiting: dict[str, Waiting] = {}
        self._running: dict[str, Running] = {}
        self._held_by_group: dict[Hashable, HeldUnits] = {}
        self._wait_reasons: dict[str, str] = {}
        self._sizing = UnitSizing(self)
        self.passes = 0
        self.eviction_trials = 0  # objectives the greedy eviction evaluated, over all passes
        self.depth = 2
        self.algorithm = "elastic"
        self.min_dop: int | None = None
        self.max_dop: int | None = None
        self.fixed_dop = 4
        self.estimate_window: int | None = DEFAULT_ESTIMATE_WINDOW
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
        self._sizing.policy_changed()

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
        self._waiting[spec.action_id] = Waiting(spec=spec, submitted_at=now)

    def cancel(self, action_id: str, now: float = 0.0) -> bool:
        """Drop a waiting action, or stop a running one and free its units. False if unknown."""
        if self._waiting.pop(action_id, None) is not None:
            self._wait_reasons.pop(action_id, None)
            return True
        running = self._running.pop(action_id, None)
        if running is None:
            return False
        self._held_by_group[running.group].remove(action_id)
        self.topology.release(action_id, now)
        return True

    def complete(self, action_id: str, now: float) -> CompletedAction:
        """An action finished: free its units, learn its duration for the history average."""
        running = self._running.pop(action_id, None)
        if running is None:
            raise KeyError(f"action {action_id!r} is not running")
        self._held_by_group[running.group].remove(action_id)
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
        """When a pass could schedule something without an arrival or completion: ``now``
        after a pass that stopped at ``candidate_cap`` (call ``schedule`` again at once), else
        when the topology changes (a quota period rolling over)."""
        if not self._waiting:
            return None
        if self._follow_up:
            return now
        return self.topology.next_change(now)

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

    def schedule(self, now: float) -> list[Assignment]:
        """One pass of Algorithm 1; returns the actions to start now with their units."""
        self.passes += 1
        self._follow_up = False
        if not self._waiting:
            return []
        self._sizing.forget()
        if self.algorithm == "elastic":
            self._sizing.set_floors(self.topology.dop_floors(self._floor_specs()))
        accommodation = self.topology.accommodation(now)
        candidates: list[Candidate] = []
        leftovers: list[tuple[Waiting, Hashable | None]] = []
        window = self.estimate_window
        reasons: dict[str, str] = {}
        queue: Iterator[Waiting] = iter(self._waiting.values())  # not mutated until _start
        cap = self.candidate_cap
        capped = False
        for entry in queue:
            if cap is not None and len(candidates) >= cap:
                capped = True  # admission stops here; this pass's estimate reads the rest
                leftovers.append((entry, None))
                break
            units = self._sizing.request_units(entry.spec)
            outcome = accommodation.add(entry.spec, units)
            if isinstance(outcome, Blocked):
                reasons[entry.spec.action_id] = outcome.reason.value
                leftovers.append((entry, outcome.group))
                if outcome.group is None or accommodation.all_groups_closed():
                    break
                continue
            candidates.append(Candidate(entry, outcome.group, units))
        if window is None or len(leftovers) < window:
            for entry in queue:
                leftovers.append((entry, None))
                if window is not None and len(leftovers) >= window:
                    break
        if self.algorithm == "elastic":
            elastic = ElasticAllocation(
                sizing=self._sizing,
                topology=self.topology,
                accommodation=accommodation,
                held=self._held_by_group,
                now=now,
                unread=len(self._waiting) - len(candidates) - len(leftovers),
                rest_model=self.rest_model,
            )
            elastic.allocate(candidates, leftovers, reasons)
            self.eviction_trials += elastic.trials
        selected = [c for c in candidates if c.entry.spec.action_id not in reasons]
        self._wait_reasons = reasons
        # Candidates outside every split first, then split members in FCFS order: the order
        # DPArrange assumed.
        selected.sort(key=lambda c: c.split_key is not None)
        # a capped pass that started something may have left units free for the queue behind
        # its candidates: another pass now (each such pass starts at least one action)
        self._follow_up = capped and bool(selected)
        return [self._start(c, now) for c in selected]

    def _floor_specs(self) -> Iterator[ActionSpec]:
        """What ``Topology.dop_floors`` reads, lazily: the running actions and the waiting ones
        the pass's estimate would read (``estimate_window``)."""
        yield from (running.spec for running in self._running.values())
        yield from (entry.spec for entry in islice(self._waiting.values(), self.estimate_window))

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
        entry = Waiting(spec=spec, submitted_at=submitted_at)
        self._waiting[spec.action_id] = entry
        return self._adopt(entry, allocation.node, allocation, now)

    def _start(self, cand: Candidate, now: float) -> Assignment:
        spec = cand.entry.spec
        allocation: Allocation = self.topology.allocate(spec, cand.group, cand.units, now)
        return self._adopt(cand.entry, cand.group, allocation, now)

    def _adopt(
        self, entry: Waiting, group: Hashable, allocation: Allocation, now: float
    ) -> Assignment:
        spec = entry.spec
        key = spec.key_resource
        key_units = allocation.units.get(key, 1) if key else 1
        expected = spec.duration(key_units, self._sizing.t1(spec))
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
        running = Running(
            spec=spec,
            submitted_at=entry.submitted_at,
            assignment=assignment,
            group=group,
            expected_end=end,
        )
        self._running[spec.action_id] = running
        held = self._held_by_group.get(group)
        if held is None:
            held = self._held_by_group[group] = HeldUnits()
        held.add(spec.action_id, end, assignment.units)
        return assignment


def pass_settings_check(*, rest_model: object, candidate_cap: object) -> None:
    """Raise ValueError naming the setting if ``rest_model`` or ``candidate_cap`` is not one the
    scheduler accepts (the constructor's check, shared with a service's configuration)."""
    if not isinstance(rest_model, str) or rest_model not in REST_MODELS:
        raise ValueError(f"rest_model: must be one of {REST_MODELS}, got {rest_model!r}")
    if candidate_cap is not None and (
        isinstance(candidate_cap, bool) or not isinstance(candidate_cap, int) or candidate_cap < 1
    ):
        raise ValueError(f"candidate_cap: must be None or an integer >= 1, got {candidate_cap!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


__all__ = [
    "ALGORITHMS",
    "Assignment",
    "CompletedAction",
    "ElasticScheduler",
    "WaitReason",
    "pass_settings_check",
]
