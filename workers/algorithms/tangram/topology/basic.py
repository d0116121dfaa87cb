"""Basic resource manager: concurrency limits and per-period quotas (arl-tangram §5.1).

For resources that cannot be scaled up — website quotas, request QPS limits, API concurrency —
the manager supports the paper's two consumption patterns: *concurrency-based* (at most ``L``
units in use at once) and *quota-based* (at most ``Q`` units consumed per period). Periods are
fixed windows ``[k·P, (k+1)·P)`` of whatever clock ``now`` comes from (virtual in the simulator,
wall-clock in the service). Each resource is its own group: a call blocked on one API does not
hold back calls to another, while calls to the same API stay FCFS.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from workers.algorithms.tangram.action import ActionSpec
from workers.algorithms.tangram.dparrange import BasicDPOperator
from workers.algorithms.tangram.topology.base import (
    Accommodation,
    Allocation,
    Blocked,
    Placement,
    Topology,
    WaitReason,
)


@dataclass(frozen=True)
class BasicLimit:
    """``concurrency``: units in use at once; ``quota``: units per ``period_s`` seconds."""

    concurrency: int | None = None
    quota: int | None = None
    period_s: float = 60.0

    def __post_init__(self) -> None:
        if self.concurrency is None and self.quota is None:
            raise ValueError("a basic resource needs a concurrency limit, a quota, or both")
        if self.concurrency is not None and self.concurrency < 0:
            raise ValueError("concurrency must be >= 0")
        if self.quota is not None and self.quota < 0:
            raise ValueError("quota must be >= 0")
        if not self.period_s > 0:
            raise ValueError("period_s must be > 0")


class BasicTopology(Topology):
    """Named resources with limits; ``node`` in allocations is the resource's name."""

    kind = "basic"

    def __init__(self, limits: Mapping[str, BasicLimit]) -> None:
        if not limits:
            raise ValueError("BasicTopology needs at least one resource")
        self.limits = dict(limits)
        self.in_use = {name: 0 for name in limits}
        self.used_in_period = {name: 0 for name in limits}
        self._window = {name: -1 for name in limits}
        self._held: dict[str, dict[str, int]] = {}
        self.violations = 0  # allocations past a limit; must stay 0 (checked by tests)

    @property
    def resource_names(self) -> frozenset[str]:
        return frozenset(self.limits)

    def set_limit(self, name: str, limit: BasicLimit) -> None:
        """Change a resource's limits live (a policy edit). Units in use stay in use; a lower
        concurrency simply admits nothing new until enough of them are released."""
        if name not in self.limits:
            self.in_use[name] = 0
            self.used_in_period[name] = 0
            self._window[name] = -1
        self.limits[name] = limit

    def _roll(self, name: str, now: float) -> None:
        window = math.floor(now / self.limits[name].period_s)
        if window != self._window[name]:
            self._window[name] = window
            self.used_in_period[name] = 0

    def free(self, name: str, now: float) -> tuple[int, int]:
        """``(concurrency left, quota left)``; a missing limit reads as a large number."""
        self._roll(name, now)
        limit = self.limits[name]
        big = 1 << 30
        conc = big if limit.concurrency is None else limit.concurrency - self.in_use[name]
        quota = big if limit.quota is None else limit.quota - self.used_in_period[name]
        return conc, quota

    def unit_counts(self, resource: str, counts: Sequence[int]) -> tuple[int, ...]:
        """No more units than the API's concurrency or quota allows at once (§5.1)."""
        limit = self.limits.get(resource)
        caps = (
            [] if limit is None else [c for c in (limit.concurrency, limit.quota) if c is not None]
        )
        if not caps:
            return tuple(counts)
        return tuple(u for u in counts if u <= min(caps))

    def never_fits(self, spec: ActionSpec) -> WaitReason | None:
        for name, demand in spec.resources.items():
            if name not in self.limits:
                return WaitReason.NOT_IN_POOL
            limit = self.limits[name]
            caps = [c for c in (limit.concurrency, limit.quota) if c is not None]
            if demand.minimum > min(caps):
                return WaitReason.NEVER_FITS
        return None

    def accommodation(self, now: float) -> _BasicAccommodation:
        return _BasicAccommodation(self, now)

    def allocate(
        self, spec: ActionSpec, group: Hashable, units: Mapping[str, int], now: float
    ) -> Allocation:
        for name, amount in units.items():
            conc, quota = self.free(name, now)
            if amount > conc or amount > quota:
                self.violations += 1
            self.in_use[name] += amount
            self.used_in_period[name] += amount
        self._held[spec.action_id] = dict(units)
        key = spec.key_resource or next(iter(units))
        return Allocation(
            action_id=spec.action_id,
            node=str(group),
            units=dict(units),
            dop=max(1, units.get(key, 1)),
        )

    def release(self, action_id: str, now: float) -> None:
        for name, amount in self._held.pop(action_id, {}).items():
            self.in_use[name] -= amount

    def holdings(self) -> dict[str, dict[str, object]]:
        out: dict[str, dict[str, object]] = {}
        for name, limit in self.limits.items():
            holders = sorted(a for a, u in self._held.items() if name in u)
            out[name] = {
                "concurrency_limit": limit.concurrency,
                "in_use": self.in_use[name],
                "quota": limit.quota,
                "used_in_period": self.used_in_period[name],
                "period_s": limit.period_s,
                "actions": holders,
            }
        return out

    def next_change(self, now: float) -> float | None:
        """The next period boundary of any resource whose quota is used up."""
        times = []
        for name, limit in self.limits.items():
            if limit.quota is None:
                continue
            _, quota = self.free(name, now)
            if quota <= 0:
                times.append((math.floor(now / limit.period_s) + 1) * limit.period_s)
        return min(times) if times else None


class _BasicAccommodation(Accommodation):
    def __init__(self, topology: BasicTopology, now: float) -> None:
        self.topology = topology
        self.now = now
        self.left: dict[str, list[int]] = {}
        for name in topology.limits:
            conc, quota = topology.free(name, now)
            self.left[name] = [conc, quota]
        self.start = {name: min(v) for name, v in self.left.items()}
        self.closed: set[str] = set()

    def add(self, spec: ActionSpec, units: Mapping[str, int]) -> Placement | Blocked:
        for name in units:
            if name not in self.left:
                return Blocked(WaitReason.NOT_IN_POOL, None)
            if name in self.closed:
                return Blocked(WaitReason.CONCURRENCY, name)
        for name, amount in units.items():
            conc, quota = self.left[name]
            if amount > quota:
                self.closed.add(name)
                return Blocked(WaitReason.QUOTA, name)
            if amount > conc:
                self.closed.add(name)
                return Blocked(WaitReason.CONCURRENCY, name)
        for name, amount in units.items():
            self.left[name][0] -= amount
            self.left[name][1] -= amount
        return Placement(group=spec.key_resource or next(iter(units)))

    def dp_operator(
        self, group: Hashable, resource: str, fixed: Sequence[tuple[ActionSpec, Mapping[str, int]]]
    ) -> BasicDPOperator:
        free = self.start[resource] - sum(u.get(resource, 0) for _, u in fixed)
        return BasicDPOperator(max(0, free))

    def all_groups_closed(self) -> bool:
        return len(self.closed) == len(self.left)
