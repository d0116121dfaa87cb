"""Action formulation: vectorised, possibly elastic resource cost (arl-tangram §4.1).

An action names, per resource (``cpu``, ``memory_mb``, ``gpu``, ``gpu_memory_mb``,
``api:<name>``, ...), either a min–max range or a discrete set of allowed units. At most one
resource is the *key elasticity resource*; its elasticity ``E(m)`` in (0, 1] gives the execution
duration ``T(m) = T1 / (E(m)·m)`` (Eq. 1), where ``T1`` is the profiled single-unit duration.
Actions with unknown elasticity or unknown ``T1`` are non-scalable: they get their minimum units
(§4.2, last paragraph), and their duration estimate comes from :mod:`.history`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray


def validate_resource_name(name: str) -> None:
    """Resource names are plain strings; ``api:<name>`` for per-API quota units."""
    if not name or not isinstance(name, str):
        raise ValueError(f"resource name must be a non-empty string, got {name!r}")
    if name.startswith("api:") and len(name) <= 4:
        raise ValueError(f"api resource needs a name after 'api:', got {name!r}")


@dataclass(frozen=True)
class ResourceDemand:
    """Feasible quantities of one resource: a range ``[minimum, maximum]`` or a discrete set."""

    minimum: int
    maximum: int
    allowed: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.allowed is not None:
            units = tuple(sorted(set(int(u) for u in self.allowed)))
            if not units or units[0] < 0:
                raise ValueError(f"allowed units must be non-empty and >= 0, got {self.allowed}")
            object.__setattr__(self, "allowed", units)
            object.__setattr__(self, "minimum", units[0])
            object.__setattr__(self, "maximum", units[-1])
        if self.minimum < 0 or self.maximum < self.minimum:
            raise ValueError(f"need 0 <= minimum <= maximum, got {self.minimum}..{self.maximum}")

    @classmethod
    def exactly(cls, units: int) -> ResourceDemand:
        return cls(minimum=units, maximum=units)

    @classmethod
    def between(cls, minimum: int, maximum: int) -> ResourceDemand:
        return cls(minimum=minimum, maximum=maximum)

    @classmethod
    def one_of(cls, units: Sequence[int]) -> ResourceDemand:
        return cls(minimum=min(units), maximum=max(units), allowed=tuple(units))

    @property
    def is_range(self) -> bool:
        return self.allowed is None

    def options(self, low: int | None = None, high: int | None = None) -> tuple[int, ...]:
        """The feasible unit counts, optionally narrowed to ``[low, high]`` (DoP bounds)."""
        base = self.allowed if self.allowed is not None else range(self.minimum, self.maximum + 1)
        return bounded_options(base, low, high)


def bounded_options(feasible: Sequence[int], low: int | None, high: int | None) -> tuple[int, ...]:
    """The feasible unit counts within the DoP bounds ``[low, high]`` (``None``: unbounded).

    The bounds are a prior that narrows the feasible set ``c_{i,key}`` (arl-tangram §4.1). Where
    they exclude every feasible count the paper is silent; Loom's rule is that the bounds yield
    to the demand: the one feasible count nearest to ``[low, high]`` remains (the smaller on a
    tie), so a policy can never make an action unschedulable. ``feasible`` is sorted ascending.
    """
    if not feasible:
        return ()
    lo = feasible[0] if low is None else low
    hi = feasible[-1] if high is None else high
    chosen = tuple(u for u in feasible if lo <= u <= hi)
    if chosen:
        return chosen
    nearest = min(feasible, key=lambda u: (max(lo - u, u - hi, 0), u))
    return (nearest,)


@dataclass(frozen=True)
class Elasticity:
    """``E(m)`` for ``m = 1..len(efficiency)`` units of the key resource (arl-tangram Eq. 1)."""

    efficiency: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.efficiency:
            raise ValueError("elasticity needs E(m) for at least m = 1")
        for m, e in enumerate(self.efficiency, start=1):
            if not (0.0 < e <= 1.0) or math.isnan(e):
                raise ValueError(f"E({m}) = {e} is outside (0, 1]")
        # hashed once: a pass looks its tables up by elasticity (``sizing``'s caches), and a
        # tuple of floats hashes every element on every lookup
        object.__setattr__(self, "_hash", hash(self.efficiency))

    def __hash__(self) -> int:
        cached: int = self.__dict__["_hash"]
        return cached

    @classmethod
    def amdahl(cls, parallel_fraction: float, max_units: int) -> Elasticity:
        """Amdahl's law: speedup ``1/((1-p) + p/m)``, so ``E(m) = speedup/m``."""
        if not 0.0 <= parallel_fraction <= 1.0:
            raise ValueError(f"parallel fraction must be in [0, 1], got {parallel_fraction}")
        p = parallel_fraction
        return cls(tuple(1.0 / (m * ((1.0 - p) + p / m)) for m in range(1, max_units + 1)))

    @classmethod
    def from_points(cls, points: Mapping[int, float], max_units: int) -> Elasticity:
        """Piecewise-constant E between profiled points (e.g. TP efficiency at 1, 2, 4, 8)."""
        if not points:
            raise ValueError("need at least one profiled point")
        known = sorted(points.items())
        table: list[float] = []
        for m in range(1, max_units + 1):
            below = [e for u, e in known if u <= m]
            table.append(below[-1] if below else known[0][1])
        return cls(tuple(table))

    def at(self, units: int) -> float:
        if units <= 0:
            raise ValueError(f"units must be positive, got {units}")
        index = min(units, len(self.efficiency)) - 1
        return self.efficiency[index]

    def speedup(self, units: int) -> float:
        return self.at(units) * units


@dataclass(frozen=True)
class ActionSpec:
    """One atomic invocation of external resources (arl-tangram §2.4, §4.1).

    ``tool`` keys the duration history (a tool name or a GPU service name). ``t1`` is the
    profiled single-unit duration (seconds); ``None`` means unknown. ``trajectory_id`` lets the
    CPU topology keep a trajectory's actions on one node (§5.2); ``service`` names the GPU service
    the action needs (§5.3).
    """

    action_id: str
    resources: Mapping[str, ResourceDemand]
    tool: str = "default"
    key_resource: str | None = None
    elasticity: Elasticity | None = None
    t1: float | None = None
    trajectory_id: str | None = None
    service: str | None = None
    metadata: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.action_id:
            raise ValueError("action_id must be non-empty")
        if not self.resources:
            raise ValueError(f"action {self.action_id}: needs at least one resource")
        for name in self.resources:
            validate_resource_name(name)
        if self.key_resource is not None and self.key_resource not in self.resources:
            raise ValueError(
                f"action {self.action_id}: key resource {self.key_resource!r} is not demanded"
            )
        if self.elasticity is not None and self.key_resource is None:
            raise ValueError(f"action {self.action_id}: elasticity given without a key resource")
        if self.t1 is not None and not (self.t1 >= 0.0 and math.isfinite(self.t1)):
            raise ValueError(f"action {self.action_id}: t1 must be finite and >= 0")

    @property
    def scalable(self) -> bool:
        """Elastic, known duration, and more than one feasible amount of the key resource."""
        if self.key_resource is None or self.elasticity is None or self.t1 is None:
            return False
        demand = self.resources[self.key_resource]
        return demand.maximum > demand.minimum

    def key_demand(self) -> ResourceDemand | None:
        return None if self.key_resource is None else self.resources[self.key_resource]

    def min_units(self) -> dict[str, int]:
        return {name: demand.minimum for name, demand in self.resources.items()}

    def duration(self, units: int, t1: float | None = None) -> float:
        """Eq. 1: ``T(m) = T1 / (E(m)·m)``; non-elastic actions take ``T1`` whatever ``m``."""
        base = self.t1 if t1 is None else t1
        if base is None:
            raise ValueError(f"action {self.action_id}: duration unknown")
        if self.elasticity is None or units <= 0:
            return base
        return base / self.elasticity.speedup(units)

    def duration_table(self, max_units: int, t1: float) -> NDArray[np.float64]:
        """``T(m)`` for ``m = 0..max_units`` (index 0 is +inf: an action needs a unit)."""
        table = np.full(max_units + 1, np.inf)
        if max_units >= 1:
            units = np.arange(1, max_units + 1)
            if self.elasticity is None:
                table[1:] = t1
            else:
                eff = np.asarray(self.elasticity.efficiency)
                capped = np.minimum(units, len(eff)) - 1
                table[1:] = t1 / (eff[capped] * units)
        return table
