"""Writes for jobs and API keys (STYLE.md §1: typed, keyword-only)."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from apps.jobs import key_cache, router_keys
from apps.jobs.authentication import KEY_PREFIX, hash_key
from apps.jobs.models import ApiKey, Job, JobStatus

_UNSET: Any = object()


def generate_raw_key(prefix: str = KEY_PREFIX) -> str:
    return prefix + secrets.token_urlsafe(32)


def api_key_create(
    *,
    job: Job | None = None,
    user: User | None = None,
    name: str = "",
    created_by: User | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for a job or a staff user; returns the row and the raw key (shown once)."""
    if (job is None) == (user is None):
        raise ValueError("an API key belongs to exactly one of a job or a user")
    raw_key = generate_raw_key()
    key = ApiKey.objects.create(
        job=job,
        user=user,
        name=name,
        prefix=raw_key[: ApiKey.PREFIX_LENGTH],
        key_hash=hash_key(raw_key),
        created_by=created_by,
    )
    return key, raw_key


def api_key_revoke(*, api_key: ApiKey) -> bool:
    """Revoke a key; False if it was already revoked (conditional update)."""
    now = timezone.now()
    changed = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=now)
    if changed:
        api_key.revoked_at = now
        key_cache.auth_changed()  # update() sends no post_save
        router_keys.router_key_withdrawn(key_hash=api_key.key_hash)
    return changed == 1


@transaction.atomic
def job_create(
    *,
    name: str,
    owner: User,
    description: str = "",
    resource_quota: dict[str, int] | None = None,
    policy_overrides: dict[str, Any] | None = None,
    with_key: bool = True,
) -> tuple[Job, str | None]:
    """Create a job and (by default) its first API key; returns the job and the raw key."""
    job = Job.objects.create(
        name=name,
        owner=owner,
        description=description,
        resource_quota=resource_quota or {},
        policy_overrides=policy_overrides or {},
    )
    raw_key = None
    if with_key:
        _, raw_key = api_key_create(job=job, name="default", created_by=owner)
    return job, raw_key


def job_update(
    *,
    job: Job,
    description: str = _UNSET,
    status: JobStatus | str = _UNSET,
    resource_quota: dict[str, int] = _UNSET,
    policy_overrides: dict[str, Any] = _UNSET,
) -> Job:
    """Update the given fields of a job (the others stay as they are)."""
    changes = {
        field: value
        for field, value in (
            ("description", description),
            ("status", status),
            ("resource_quota", resource_quota),
            ("policy_overrides", policy_overrides),
        )
        if value is not _UNSET
    }
    for field, value in changes.items():
        setattr(job, field, value)
    if changes:
        job.save(update_fields=[*changes, "updated_at"])
    return job
