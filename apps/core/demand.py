"""Resource demands: the one registry of resource names and the parser every entry point uses.

An action (arl-tangram §3.1) asks, per resource, for a range ``{"min": 1, "max": 8}`` or a set of
allowed discrete units ``{"units": [1, 2, 4, 8]}`` (a bare integer ``n`` means exactly n). An
optional elasticity names a key resource and its efficiency curve E(m), m = 1..max, each in (0, 1];
the duration at m units is ``T(m) = T1 / (E(m)·m)`` (arl-tangram §4.1). Rate-limited external APIs
are resources named ``api:<ApiQuota name>``.

Pure: no Django, so the scheduler, the agents and the simulator can import it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

API_PREFIX = "api:"


@dataclass(frozen=True)
class ResourceSpec:
    name: str
    unit: str
    max_units: int
    description: str


RESOURCES: dict[str, ResourceSpec] = {
    spec.name: spec
    for spec in (
        ResourceSpec("cpu", "cores", 4096, "CPU cores (cpuset-pinned on CPU agents)"),
        ResourceSpec("memory_mb", "MiB", 16 * 1024 * 1024, "host memory"),
        ResourceSpec("gpu", "GPUs", 1024, "whole GPUs (allocated in 1/2/4/8 chunks)"),
        ResourceSpec("gpu_memory_mb", "MiB", 16 * 1024 * 1024, "GPU memory"),
    )
}
API_MAX_UNITS = 1_000_000
# When an action gives no elasticity, its key resource is the first of these it asks for.
KEY_RESOURCE_PREFERENCE = ("gpu", "cpu", "gpu_memory_mb", "memory_mb")
MAX_EFFICIENCY_POINTS = 4096

ErrorTree = dict[str, Any]


class DemandError(ValueError):
    """Invalid demand or elasticity; ``detail`` maps dotted paths to lists of reasons."""

    def __init__(self, detail: ErrorTree):
        super().__init__(str(detail))
        self.detail = detail


@dataclass(frozen=True)
class ResourceDemand:
    """One resource's demand: the allowed unit counts as a range or as a discrete set."""

    minimum: int
    maximum: int
    units: tuple[int, ...] | None = None

    def as_json(self) -> dict[str, Any]:
        if self.units is not None:
            return {"units": list(self.units)}
        return {"min": self.minimum, "max": self.maximum}


@dataclass(frozen=True)
class Demand:
    resources: dict[str, ResourceDemand]
    key_resource: str
    elasticity: dict[str, Any] | None

    @property
    def key(self) -> ResourceDemand:
        return self.resources[self.key_resource]

    def as_json(self) -> dict[str, Any]:
        return {name: demand.as_json() for name, demand in self.resources.items()}


def resource_limit(name: str, api_quotas: Collection[str]) -> int | None:
    """The largest allowed unit count of ``name``, or None if the name is unknown."""
    if name in RESOURCES:
        return RESOURCES[name].max_units
    if name.startswith(API_PREFIX) and name[len(API_PREFIX) :] in api_quotas:
        return API_MAX_UNITS
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_one(value: Any, limit: int) -> tuple[ResourceDemand | None, ErrorTree]:
    if _is_int(value):
        value = {"min": value, "max": value}
    if not isinstance(value, Mapping):
        return None, {"": ["must be an integer, {min, max} or {units: [...]}"]}
    keys = set(value)
    if keys == {"units"}:
        units = value["units"]
        if not isinstance(units, list):
            return None, {"units": ["must be a list of integers"]}
        if not units:
            return None, {"units": ["must not be empty"]}
        errors: ErrorTree = {}
        for index, unit in enumerate(units):
            if not _is_int(unit):
                errors[f"[{index}]"] = ["must be an integer"]
            elif unit < 1:
                errors[f"[{index}]"] = [f"must be ≥ 1, got {unit}"]
            elif unit > limit:
                errors[f"[{index}]"] = [f"must be ≤ {limit}, got {unit}"]
        if errors:
            return None, {"units": errors}
        if len(set(units)) != len(units):
            return None, {"units": ["must not repeat a value"]}
        ordered = tuple(sorted(units))
        return ResourceDemand(ordered[0], ordered[-1], ordered), {}
    if keys == {"min", "max"}:
        errors = {}
        for bound in ("min", "max"):
            number = value[bound]
            if not _is_int(number):
                errors[bound] = ["must be an integer"]
            elif number < 0:
                errors[bound] = [f"must be ≥ 0, got {number}"]
            elif number > limit:
                errors[bound] = [f"must be ≤ {limit}, got {number}"]
        if errors:
            return None, errors
        low, high = value["min"], value["max"]
        if low > high:
            return None, {"min": [f"must be ≤ max ({high})"]}
        if high == 0:
            return None, {"max": ["must be ≥ 1 (leave the resource out instead)"]}
        return ResourceDemand(low, high), {}
    unknown = sorted(keys - {"min", "max", "units"})
    if unknown:
        return None, {unknown[0]: ["unknown key; use min and max, or units"]}
    if "units" in keys:
        return None, {"units": ["units cannot be combined with min/max"]}
    missing = "max" if "min" in keys else "min"
    return None, {missing: ["this field is required"]}


def _parse_elasticity(value: Any, resources: Mapping[str, ResourceDemand]) -> ErrorTree:
    if not isinstance(value, Mapping):
        return {"": ["must be an object {resource, efficiency} or null"]}
    unknown = sorted(set(value) - {"resource", "efficiency"})
    if unknown:
        return {unknown[0]: ["unknown key; expected resource and efficiency"]}
    errors: ErrorTree = {}
    resource = value.get("resource")
    if not isinstance(resource, str):
        errors["resource"] = ["this field is required and must be a resource name"]
    elif resource not in resources:
        errors["resource"] = [f"{resource!r} is not in the demand ({', '.join(resources)})"]
    curve = value.get("efficiency")
    if not isinstance(curve, list) or not curve:
        errors["efficiency"] = ["must be a non-empty list of E(m) for m = 1, 2, ..."]
        return errors
    if len(curve) > MAX_EFFICIENCY_POINTS:
        errors["efficiency"] = [f"at most {MAX_EFFICIENCY_POINTS} points"]
        return errors
    point_errors: ErrorTree = {}
    for index, point in enumerate(curve):
        if not isinstance(point, int | float) or isinstance(point, bool):
            point_errors[f"[{index}]"] = ["must be a number"]
        elif not math.isfinite(point) or not 0 < point <= 1:
            point_errors[f"[{index}]"] = [f"E({index + 1}) must be in (0, 1], got {point}"]
    if point_errors:
        errors["efficiency"] = point_errors
    elif "resource" not in errors and isinstance(resource, str):
        needed = resources[resource].maximum
        if len(curve) < needed:
            errors["efficiency"] = [
                f"must give E(m) for m = 1..{needed} (the max of {resource}), got {len(curve)}"
            ]
    return errors


def parse_demand(
    demand: Any, elasticity: Any = None, *, api_quotas: Collection[str] = ()
) -> Demand:
    """Validate and normalise a demand (+ optional elasticity); raise DemandError if invalid.

    ``api_quotas`` are the registered ApiQuota names (``api:<name>`` resources).
    """
    if not isinstance(demand, Mapping):
        raise DemandError({"demand": ["must be an object mapping resource names to demands"]})
    if not demand:
        raise DemandError({"demand": ["must ask for at least one resource"]})
    errors: ErrorTree = {}
    resources: dict[str, ResourceDemand] = {}
    for name, value in demand.items():
        limit = resource_limit(name, api_quotas)
        if limit is None:
            known = [*RESOURCES, *(API_PREFIX + quota for quota in sorted(api_quotas))]
            errors[name] = [f"unknown resource; known: {', '.join(known)}"]
            continue
        parsed, resource_errors = _parse_one(value, limit)
        if parsed is None:
            errors[name] = resource_errors.get("", resource_errors)
        else:
            resources[name] = parsed
    if errors:
        raise DemandError({"demand": errors})
    normalised_elasticity: dict[str, Any] | None = None
    if elasticity is not None:
        elasticity_errors = _parse_elasticity(elasticity, resources)
        if elasticity_errors:
            raise DemandError({"elasticity": elasticity_errors.get("", elasticity_errors)})
        normalised_elasticity = {
            "resource": elasticity["resource"],
            "efficiency": [float(point) for point in elasticity["efficiency"]],
        }
    key_resource = (
        normalised_elasticity["resource"]
        if normalised_elasticity
        else next(
            (name for name in KEY_RESOURCE_PREFERENCE if name in resources),
            next(iter(resources)),
        )
    )
    return Demand(resources=resources, key_resource=key_resource, elasticity=normalised_elasticity)
