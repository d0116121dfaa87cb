"""The action scheduler's live policy: its fields, their bounds, and the one check of a policy.

Every edge that writes a policy (the REST API, the Django admin, the dashboard's websocket) and
the scheduler service that applies one call :func:`policy_check`, so a policy the control plane
accepts is one the scheduler can run, and the service can refuse the rest instead of crashing.

Knob names follow the Tangram scheduler's live-settable options (arl-tangram §4.2): ``depth`` of
the objective approximation (Alg. 2), the DoP bounds of elastic actions (§4.1), the algorithm
(Loom's elastic scheduler, Alg. 1, or the paper's baselines ``fcfs-min`` and ``fixed-dop``, §6.4)
and ``estimate_window``, how many remaining actions the estimate reads (a Loom deviation, see
scheduler.py). ``quotas`` overrides the limits of a pool's rate-limited APIs (§5.1).

Loom's rules where the paper is silent:

- a field that is present is checked and never changed; a field that is absent takes its
  default, clamped into the bounds the present fields and the pool set (an 8-core pool's
  default ``max_dop`` is 8), so that leaving a field out can never make a policy invalid;
- ``dop_limit`` is the most key units one action can ever hold in the pool (the caller knows
  the pool: the largest node's cores or GPUs, an API's concurrency) and bounds every DoP field;
  ``min_dop_limit`` is what *every* node can give one action (the smallest node) and bounds
  ``min_dop``, since an action pinned to a smaller node could never start (sizing.py lowers
  such a ``min_dop`` if a pool shrinks after the edit). ``None`` when unknown (a pool with no
  node yet): then only the fields' own bounds apply.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

ALGORITHMS = ("elastic", "fcfs-min", "fixed-dop")
SCHEDULER_FIELDS = ("algorithm", "depth", "min_dop", "max_dop", "fixed_dop", "estimate_window")
MAX_DOP = 1024
MAX_QUOTA_UNITS = 2**31 - 1
MAX_PERIOD_S = 366 * 86_400.0
QUOTA_LIMITS = ("concurrency", "quota", "period_s")

Problem = dict[str, str]


@dataclass(frozen=True)
class PolicyField:
    """One knob as the dashboard's form renders it (``as_json``) and the check bounds it."""

    name: str
    label: str
    type: str  # int | choice | json
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
        "min_dop", "DoP min", "int", 1, 1, MAX_DOP, help="fewest units an elastic action gets"
    ),
    PolicyField(
        "max_dop", "DoP max", "int", 32, 1, MAX_DOP, help="most units an elastic action gets"
    ),
    PolicyField(
        "fixed_dop", "Fixed DoP", "int", 4, 1, MAX_DOP, help="units per action under fixed-dop"
    ),
    PolicyField(
        "estimate_window",
        "Estimate window",
        "int",
        64,
        0,
        65_536,
        help="waiting actions the objective estimate reads per pass (Alg. 2)",
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


def policy_defaults(dop_limit: int | None = None) -> dict[str, Any]:
    """Every field's default; the DoP ones clamped into a pool of ``dop_limit`` units."""
    defaults = {field.name: field.default for field in POLICY_FIELDS}
    if dop_limit is not None and dop_limit >= 1:
        for name in ("min_dop", "max_dop", "fixed_dop"):
            defaults[name] = min(defaults[name], dop_limit)
    return defaults


def _problem(name: str, reason: str) -> Problem:
    return {"field": f"settings.{name}", "reason": reason}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_number(field: PolicyField, value: Any) -> str | None:
    if not _is_number(value):
        return "must be a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if field.min is not None and value < field.min:
        return f"must be ≥ {field.min:g}"
    if field.max is not None and value > field.max:
        return f"must be ≤ {field.max:g}"
    if field.type == "int" and not float(value).is_integer():
        return "must be a whole number"
    return None


def _check_quota_units(name: str, key: str, units: Any) -> str | None:
    if units is None:
        return None
    if not isinstance(units, int) or isinstance(units, bool):
        return f"{name}.{key} must be a whole number"
    if units < 0:
        return f"{name}.{key} must be ≥ 0"
    if units > MAX_QUOTA_UNITS:
        return f"{name}.{key} must be ≤ {MAX_QUOTA_UNITS}"
    return None


def _check_quotas(value: Any) -> str | None:
    if not isinstance(value, dict):
        return 'must be an object like {"api:search": {"concurrency": 16}}'
    for name, limits in value.items():
        if not str(name).startswith("api:") or len(str(name)) <= 4:
            return f"{name!r} is not an API resource (api:<name>)"
        if not isinstance(limits, dict) or not limits:
            return f"{name} must be an object with concurrency, quota and/or period_s"
        unknown = set(limits) - set(QUOTA_LIMITS)
        if unknown:
            return f"{name}.{sorted(unknown)[0]} is not a limit (concurrency, quota, period_s)"
        for key in ("concurrency", "quota"):
            reason = _check_quota_units(name, key, limits.get(key))
            if reason:
                return reason
        if limits.get("concurrency") is None and limits.get("quota") is None:
            return f"{name} needs a concurrency or a quota"
        period = limits.get("period_s", 60)
        if not _is_number(period) or not 0 < period <= MAX_PERIOD_S:
            return f"{name}.period_s must be a number of seconds in (0, {MAX_PERIOD_S:g}]"
    return None


def _check_field(field: PolicyField, value: Any) -> str | None:
    if field.type == "choice":
        if isinstance(value, str) and value in (field.choices or ()):
            return None
        return f"must be one of {', '.join(field.choices or ())}"
    if field.type == "json":
        return _check_quotas(value)
    return _check_number(field, value)


def _check_dop(
    given: dict[str, Any], clean: dict[str, Any], dop_limit: int | None, min_dop_limit: int | None
) -> list[Problem]:
    """``min_dop ≤ max_dop ≤ dop_limit`` and ``fixed_dop`` inside both; each problem on a field
    the operator gave (an absent one was clamped already)."""
    problems: list[Problem] = []
    low, high, fixed = clean["min_dop"], clean["max_dop"], clean["fixed_dop"]
    if dop_limit is not None:
        for name in ("max_dop", "fixed_dop"):
            if name in given and clean[name] > dop_limit:
                reason = f"must be ≤ {dop_limit}, the most units one action can hold in this pool"
                problems.append(_problem(name, reason))
    if min_dop_limit is not None and "min_dop" in given and low > min_dop_limit:
        reason = f"must be ≤ {min_dop_limit}, the most units every node of this pool can give"
        problems.append(_problem("min_dop", reason))
    if problems:
        return problems
    if low > high:
        if "max_dop" in given:
            problems.append(_problem("max_dop", f"must be ≥ min_dop ({low})"))
        else:
            problems.append(_problem("min_dop", f"must be ≤ max_dop ({high})"))
    elif "fixed_dop" in given and not low <= fixed <= high:
        problems.append(
            _problem("fixed_dop", f"must be between min_dop and max_dop ({low}–{high})")
        )
    return problems


def _clamp_absent(given: dict[str, Any], clean: dict[str, Any], dop_limit: int | None) -> None:
    """Absent DoP fields follow the present ones: max_dop ≥ min_dop, fixed_dop inside both."""
    if "max_dop" not in given:
        top = (
            clean["max_dop"] if "min_dop" not in given else max(clean["max_dop"], clean["min_dop"])
        )
        clean["max_dop"] = top if dop_limit is None else max(1, min(top, dop_limit))
    if "min_dop" not in given:
        clean["min_dop"] = min(clean["min_dop"], clean["max_dop"])  # the default is 1 anyway
    if "fixed_dop" not in given:
        clean["fixed_dop"] = min(max(clean["fixed_dop"], clean["min_dop"]), clean["max_dop"])


def policy_check(
    settings: Any, *, dop_limit: int | None = None, min_dop_limit: int | None = None
) -> tuple[dict[str, Any], list[Problem]]:
    """Return (every field's effective value, problems); each problem names ``settings.<field>``
    and the reason. ``clean`` is meaningful only without problems."""
    if not isinstance(settings, dict):
        return {}, [{"field": "settings", "reason": "must be an object"}]
    if dop_limit is not None and dop_limit < 1:
        dop_limit = None  # a pool whose nodes have no units of this kind: nothing to bound by
    if min_dop_limit is None or min_dop_limit < 1:
        min_dop_limit = dop_limit
    problems = [
        _problem(str(name), "unknown policy setting")
        for name in settings
        if name not in FIELDS_BY_NAME
    ]
    clean = policy_defaults(dop_limit)
    given: dict[str, Any] = {}
    for field in POLICY_FIELDS:
        if field.name not in settings:
            continue
        value = settings[field.name]
        reason = _check_field(field, value)
        if reason:
            problems.append(_problem(field.name, reason))
            continue
        clean[field.name] = given[field.name] = int(value) if field.type == "int" else value
    if not problems:
        _clamp_absent(given, clean, dop_limit)
        problems.extend(_check_dop(given, clean, dop_limit, min_dop_limit))
    return clean, problems


def policy_problems_text(problems: list[Problem]) -> str:
    """One line for logs and the dashboard: ``settings.min_dop: must be ≤ …; …``."""
    return "; ".join(f"{p['field']}: {p['reason']}" for p in problems)
