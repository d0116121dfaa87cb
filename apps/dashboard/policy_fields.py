"""The action-scheduler policy knobs an operator edits, with their validation.

Knob names follow the Tangram scheduler's live-settable options (arl-tangram §4.2: ``depth`` of
the objective approximation, Alg. 2; DoP bounds of elastic actions; the algorithm: Loom's elastic
scheduler or the paper's baselines ``fcfs-min`` and ``fixed-dop``). ``quotas`` caps what one job may
hold at once, per resource: ``{"<job name>": {"cpu": 32}}``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

ALGORITHMS = ("elastic", "fcfs-min", "fixed-dop")


@dataclass(frozen=True)
class PolicyField:
    name: str
    label: str
    type: str  # int | float | bool | choice | json
    default: Any
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    help: str = ""

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["choices"] = list(self.choices) if self.choices else None
        return data


POLICY_FIELDS: tuple[PolicyField, ...] = (
    PolicyField(
        "algorithm",
        "Algorithm",
        "choice",
        "elastic",
        choices=ALGORITHMS,
        help="elastic = Tangram (Alg. 1); fcfs-min and fixed-dop are the paper's baselines",
    ),
    PolicyField(
        "depth",
        "Search depth",
        "int",
        2,
        1,
        16,
        help="allocations the first remaining action explores (Alg. 2)",
    ),
    PolicyField(
        "min_dop", "DoP min", "int", 1, 1, 1024, help="fewest units an elastic action gets"
    ),
    PolicyField("max_dop", "DoP max", "int", 32, 1, 1024, help="most units an elastic action gets"),
    PolicyField(
        "fixed_dop", "Fixed DoP", "int", 4, 1, 1024, help="units per action under fixed-dop"
    ),
    PolicyField(
        "quotas",
        "Job quotas",
        "json",
        {},
        help='most units one job may hold, e.g. {"my-job": {"cpu": 32}}',
    ),
)
FIELDS_BY_NAME = {field.name: field for field in POLICY_FIELDS}


def policy_defaults() -> dict[str, Any]:
    return {field.name: field.default for field in POLICY_FIELDS}


def _check_number(field: PolicyField, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if field.type == "int" and not float(value).is_integer():
        return "must be a whole number"
    if field.min is not None and value < field.min:
        return f"must be ≥ {field.min:g}"
    if field.max is not None and value > field.max:
        return f"must be ≤ {field.max:g}"
    return None


def _check_quotas(value: Any) -> str | None:
    if not isinstance(value, dict):
        return 'must be an object like {"job-name": {"cpu": 32}}'
    for job, limits in value.items():
        if not isinstance(limits, dict):
            return f"quota of {job!r} must be an object of resource → units"
        for resource, units in limits.items():
            if isinstance(units, bool) or not isinstance(units, int | float) or units < 0:
                return f"{job}.{resource} must be a non-negative number"
    return None


def policy_validate(settings: Any) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Return (clean settings, errors); each error names ``settings.<field>`` and the reason."""
    if not isinstance(settings, dict):
        return {}, [{"field": "settings", "reason": "must be an object"}]
    errors: list[dict[str, str]] = []
    clean = policy_defaults()
    for name in settings:
        if name not in FIELDS_BY_NAME:
            errors.append({"field": f"settings.{name}", "reason": "unknown policy setting"})
    for field in POLICY_FIELDS:
        if field.name not in settings:
            continue
        value = settings[field.name]
        reason: str | None
        if field.type == "choice":
            reason = (
                None
                if value in (field.choices or ())
                else f"must be one of {', '.join(field.choices or ())}"
            )
        elif field.type == "bool":
            reason = None if isinstance(value, bool) else "must be true or false"
        elif field.type == "json":
            reason = _check_quotas(value)
        else:
            reason = _check_number(field, value)
        if reason:
            errors.append({"field": f"settings.{field.name}", "reason": reason})
        else:
            clean[field.name] = int(value) if field.type == "int" else value
    if not errors and clean["min_dop"] > clean["max_dop"]:
        errors.append(
            {"field": "settings.max_dop", "reason": f"must be ≥ min_dop ({clean['min_dop']})"}
        )
    return clean, errors


def policy_diff(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Changed keys as ``[{"field", "old", "new"}]``, sorted by field."""
    keys = sorted(set(old) | set(new))
    return [
        {"field": key, "old": old.get(key), "new": new.get(key)}
        for key in keys
        if old.get(key) != new.get(key)
    ]
