"""The one check of a policy's settings, for every edge that writes one (REST API, admin,
dashboard websocket): the pure rules of workers/algorithms/tangram/policy.py plus the pool's
size as the control plane knows it.

Pool size (Loom's rule, arl-tangram §5): the most key units one action can hold. A CPU action
runs on one node (§5.2), a GPU action on a chunk inside one node (§5.3), an API action within
one API's concurrency (§5.1); so ``max_dop``/``fixed_dop`` are bounded by the largest node (or
API) and ``min_dop`` by the smallest, which every action pinned anywhere can reach. Every node
registered to the pool counts, whatever its status: a node that is offline now is still part of
the pool an operator sizes a policy for. A pool with no node (or API) yet has no size: only the
fields' own bounds apply, and the scheduler bounds DoP by its live topology once nodes join.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Max, Min

from apps.policies.models import PolicyKind
from apps.resources.models import PoolKind, ResourcePool
from workers.algorithms.tangram.policy import Problem, policy_check, policy_problems_text


class PolicyInvalid(ValueError):
    """Settings that break a rule; ``errors`` in Loom's shape ``[{"field", "reason"}]``."""

    def __init__(self, errors: list[Problem]) -> None:
        super().__init__(policy_problems_text(errors))
        self.errors = errors


def pool_dop_limits(pool: ResourcePool | None) -> tuple[int | None, int | None]:
    """(largest, smallest): the most key units one action can hold in the pool, and what every
    node (or API) of it can give; (None, None) when the pool has no size yet."""
    if pool is None:
        return None, None
    if pool.kind == PoolKind.API:
        sizes = pool.api_quotas.aggregate(top=Max("concurrency_limit"))
        return sizes["top"], sizes["top"]
    column = "gpus" if pool.kind == PoolKind.GPU else "cores"
    sizes = pool.nodes.filter(**{f"{column}__gt": 0}).aggregate(top=Max(column), low=Min(column))
    return sizes["top"], sizes["low"]


def policy_settings_check(
    *, kind: PolicyKind | str, settings: Any, pool: ResourcePool | None
) -> dict[str, Any]:
    """The effective settings of an action-scheduler policy (every field, absent ones at their
    clamped defaults), or PolicyInvalid naming each field and why.

    Other kinds have no live consumer in Loom yet, so only their shape (an object) is checked.
    """
    if kind != PolicyKind.ACTION_SCHEDULER:
        if not isinstance(settings, dict):
            raise PolicyInvalid([{"field": "settings", "reason": "must be an object"}])
        return settings
    largest, smallest = pool_dop_limits(pool)
    clean, problems = policy_check(settings, dop_limit=largest, min_dop_limit=smallest)
    if problems:
        raise PolicyInvalid(problems)
    return clean
