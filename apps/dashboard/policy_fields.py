"""The action-scheduler policy knobs an operator edits, with their validation.

Knob names follow the Tangram scheduler's live-settable options (arl-tangram §4.2: ``depth`` of
the objective approximation, Alg. 2; DoP bounds of elastic actions; the algorithm: Loom's elastic
scheduler or the paper's baselines ``fcfs-min`` and ``fixed-dop``). ``quotas`` overrides the limits
of the pool's rate-limited APIs (§5.1), ``{"api:<name>": {"concurrency", "quota", "period_s"}}``;
the scheduler of an API pool applies them live.
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
        "API quotas",
        "json",
        {},
        help=(
            "limits of the pool's rate-limited APIs, applied live (arl-tangram §5.1), e.g. "
            '{"api:search": {"concurrency": 16, "quota": 600, "period_s": 60}}'
        ),
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
        return 'must be an object like {"api:search": {"concurrency": 16}}'
    for name, limits in value.items():
        if not str(name).startswith("api:"):
            return f"{name!r} is not an API resource (api:<name>)"
        if not isinstance(limits, dict) or not limits:
            return f"{name} must be an object with concurrency, quota and/or period_s"
        unknown = set(limits) - {"concurrency", "quota", "period_s"}
        if unknown:
            return f"{name}.{sorted(unknown)[0]} is not a limit (concurrency, quota, period_s)"
        for key in ("concurrency", "quota"):
            units = limits.get(key)
            if units is not None and (isinstance(units, bool) or not isinstance(units, int)):
                return f"{name}.{key} must be a whole number"
            if units is not None and units < 0:
                return f"{name}.{key} must be ≥ 0"
        if limits.get("concurrency") is None and limits.get("quota") is None:
            return f"{name} needs a concurrency or a quota"
        period = limits.get("period_s", 60)
        if isinstance(period, bool) or not isinstance(period, int | float) or not period > 0:
            return f"{name}.period_s must be a number of seconds > 0"
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
