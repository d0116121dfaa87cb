"""The action-scheduler policy knobs an operator edits from the dashboard, with their check.

The fields and every rule live in one place, workers/algorithms/tangram/policy.py, shared with
the REST API, the admin and the scheduler service; this module adds the pool's size as the
control plane knows it (apps/policies/validation.py) and keeps the dashboard's names.
"""

from __future__ import annotations

from typing import Any

from apps.policies.validation import pool_dop_limits
from apps.resources.models import ResourcePool
from workers.algorithms.tangram.policy import (
    ALGORITHMS,
    FIELDS_BY_NAME,
    POLICY_FIELDS,
    PolicyField,
    Problem,
    policy_check,
)
from workers.algorithms.tangram.policy import policy_defaults as _defaults

__all__ = [
    "ALGORITHMS",
    "FIELDS_BY_NAME",
    "POLICY_FIELDS",
    "PolicyField",
    "policy_defaults",
    "policy_diff",
    "policy_validate",
]


def policy_defaults(pool: ResourcePool | None = None) -> dict[str, Any]:
    """Every field's default; the DoP ones clamped into the pool (an 8-core pool shows 8)."""
    return _defaults(pool_dop_limits(pool)[0])


def policy_validate(
    settings: Any, *, pool: ResourcePool | None = None
) -> tuple[dict[str, Any], list[Problem]]:
    """Return (clean settings, errors); each error names ``settings.<field>`` and the reason."""
    largest, smallest = pool_dop_limits(pool)
    return policy_check(settings, dop_limit=largest, min_dop_limit=smallest)


def policy_diff(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """Changed keys as ``[{"field", "old", "new"}]``, sorted by field."""
    keys = sorted(set(old) | set(new))
    return [
        {"field": key, "old": old.get(key), "new": new.get(key)}
        for key in keys
        if old.get(key) != new.get(key)
    ]
