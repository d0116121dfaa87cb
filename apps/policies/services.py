"""Writes for policies: every change is a new PolicyVersion with its author and diff.

Both writes check the settings against every rule and the pool (validation.py) first, so the
REST API, the admin and the dashboard can never store a policy the scheduler cannot run.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from apps.core.live import Change, changed_on_commit
from apps.policies.models import Policy, PolicyKind, PolicyVersion
from apps.policies.validation import PolicyInvalid, policy_settings_check
from apps.resources.models import ResourcePool

__all__ = ["PolicyInvalid", "PolicyVersionConflict", "policy_create", "policy_update"]


class PolicyVersionConflict(Exception):
    def __init__(self, current: int):
        super().__init__(f"policy is at version {current}")
        self.current = current


def settings_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Top-level diff: keys added, removed, and changed (as [old, new])."""
    return {
        "added": {key: new[key] for key in new.keys() - old.keys()},
        "removed": {key: old[key] for key in old.keys() - new.keys()},
        "changed": {
            key: [old[key], new[key]] for key in old.keys() & new.keys() if old[key] != new[key]
        },
    }


def _user_or_none(user: User | None) -> User | None:
    return user if user is not None and user.is_authenticated else None


def _pool_changed_on_commit(pool: ResourcePool | None) -> None:
    """A pool's snapshot names its stored policy version: show the new one live."""
    if pool is not None:
        changed_on_commit([Change("pool", pool.name)])


@transaction.atomic
def policy_create(
    *,
    name: str,
    kind: PolicyKind | str,
    settings: dict[str, Any],
    author: User | None,
    pool: ResourcePool | None = None,
    comment: str = "",
) -> Policy:
    author = _user_or_none(author)
    policy_settings_check(kind=kind, settings=settings, pool=pool)
    policy = Policy.objects.create(
        name=name, kind=kind, pool=pool, settings=settings, version=1, updated_by=author
    )
    PolicyVersion.objects.create(
        policy=policy,
        version=1,
        settings=settings,
        diff=settings_diff({}, settings),
        author=author,
        comment=comment or "created",
    )
    _pool_changed_on_commit(pool)
    return policy


@transaction.atomic
def policy_update(
    *,
    policy_id: int,
    settings: dict[str, Any],
    author: User | None,
    expected_version: int | None = None,
    comment: str = "",
) -> Policy:
    """Replace the settings, recording a new version; optimistic check on ``expected_version``;
    PolicyInvalid (nothing stored) when the settings break a rule for the policy's pool."""
    author = _user_or_none(author)
    policy = Policy.objects.select_for_update().get(pk=policy_id)
    if expected_version is not None and expected_version != policy.version:
        raise PolicyVersionConflict(policy.version)
    policy_settings_check(kind=policy.kind, settings=settings, pool=policy.pool)
    diff = settings_diff(policy.settings, settings)
    if not any(diff.values()):
        return policy
    new_version = policy.version + 1
    changed = Policy.objects.filter(pk=policy.pk, version=policy.version).update(
        settings=settings, version=new_version, updated_by=author
    )
    if changed != 1:
        raise PolicyVersionConflict(policy.version)
    PolicyVersion.objects.create(
        policy=policy,
        version=new_version,
        settings=settings,
        diff=diff,
        author=author,
        comment=comment,
    )
    _pool_changed_on_commit(policy.pool)  # loaded by the check above
    policy.refresh_from_db()
    return policy
