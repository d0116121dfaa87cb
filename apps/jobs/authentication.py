"""``Authorization: Bearer <key>`` authentication for job keys and staff keys."""

from __future__ import annotations

import functools
import hashlib
import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, NoReturn

from django.contrib.auth.models import User
from django.db import DEFAULT_DB_ALIAS, OperationalError, connection
from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.jobs import key_cache
from apps.jobs.models import ApiKey, Job

KEY_PREFIX = "loom_"
NODE_TOKEN_PREFIX = "loomnode_"
LAST_USED_RESOLUTION = timedelta(minutes=1)
# A cached row is never touched: it is re-read (and touched if stale) every KEY_CACHE_TTL_S, so
# a key in use has its last_used_at at most LAST_USED_RESOLUTION + KEY_CACHE_TTL_S old.
assert timedelta(seconds=key_cache.KEY_CACHE_TTL_S) < LAST_USED_RESOLUTION
log = logging.getLogger("loom.auth")


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


def bearer_token(request: Request) -> str | None:
    """The bearer token of the request, None without one; 401 when the header is malformed."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None  # e.g. Basic: not ours
    token = token.strip()
    if not token or " " in token:
        raise exceptions.AuthenticationFailed(
            "malformed Authorization header; expected 'Bearer <key>'"
        )
    return token


class BearerKeyAuthentication(authentication.BaseAuthentication):
    """A job key acts for its job (as its owner, scoped to the job); a staff key as its user."""

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="loom"'

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        token = bearer_token(request)
        if token is None:
            return None
        if token.startswith(NODE_TOKEN_PREFIX):
            raise exceptions.AuthenticationFailed(
                "a node token only authenticates node heartbeats; use an API key"
            )
        key_hash = hash_key(token)
        row = key_cache.get(key_hash) or self._verified_row(key_hash)
        key = ApiKey.from_db(
            DEFAULT_DB_ALIAS,
            ["id", "job_id", "user_id", "prefix"],
            [row.key_id, row.job_id, row.user_id, row.prefix],
        )
        user: Any
        if row.job_id is not None:
            # Deferred instances: what a view reads beyond these loads on access.
            key.job = Job.from_db(
                DEFAULT_DB_ALIAS,
                ["id", "owner_id", "status"],
                [row.job_id, row.owner_id, row.job_status],
            )
            user = User.from_db(DEFAULT_DB_ALIAS, ["id"], [row.owner_id])
        else:
            user = User.from_db(
                DEFAULT_DB_ALIAS, ["id", "is_active", "is_staff"], [row.user_id, True, True]
            )
        return user, key

    def _verified_row(self, key_hash: str) -> _KeyRow:
        """Read the key from the database, refuse it or touch its last use, and cache it."""
        ticket = key_cache.ticket()
        row = _key_row(key_hash)
        if row is None:
            raise exceptions.AuthenticationFailed("unknown API key")
        if row.revoked or (row.job_id is None and not (row.user_active and row.user_staff)):
            self._refuse(key_hash)
        if row.last_used_stale:
            try:
                ApiKey.objects.filter(pk=row.key_id).update(last_used_at=timezone.now())
            except OperationalError:
                # Bookkeeping at one-minute resolution: a write lock held elsewhere (SQLite)
                # must not fail the request; the next request touches it (so: not cached).
                log.debug("last_used_at of key %s not touched", row.prefix, exc_info=True)
                return row
            row = replace(row, last_used_stale=False)
        key_cache.put(key_hash, row, ticket)
        return row

    def _refuse(self, key_hash: str) -> NoReturn:
        """A key that exists but may not act: say why (the rare path, read through the ORM)."""
        key = ApiKey.objects.select_related("user").get(key_hash=key_hash)
        if key.revoked_at is not None:
            raise exceptions.AuthenticationFailed(
                f"API key {key.prefix}… was revoked at {key.revoked_at.isoformat()}"
            )
        raise exceptions.AuthenticationFailed(
            f"API key {key.prefix}… belongs to a user who is no longer active staff"
        )


@dataclass(frozen=True)
class _KeyRow:
    key_id: int
    job_id: int | None
    user_id: int | None
    prefix: str
    revoked: bool
    last_used_stale: bool
    owner_id: int | None
    job_status: str | None
    user_active: bool
    user_staff: bool


@functools.cache
def _key_sql() -> str:
    quote = connection.ops.quote_name
    keys, jobs, users = (quote(m._meta.db_table) for m in (ApiKey, Job, User))
    return (
        "SELECT k.id, k.job_id, k.user_id, k.prefix, k.revoked_at IS NOT NULL,"
        " (k.last_used_at IS NULL OR k.last_used_at < %s), j.owner_id, j.status,"
        " u.is_active, u.is_staff"
        f" FROM {keys} k LEFT JOIN {jobs} j ON j.id = k.job_id"
        f" LEFT JOIN {users} u ON u.id = k.user_id WHERE k.key_hash = %s"
    )


def _key_row(key_hash: str) -> _KeyRow | None:
    """The key and what authenticating it needs, in one hand-written query.

    Every API request authenticates, so this is the hottest read there is: the ORM's
    ``select_related`` version of it costs ~1 ms of query compilation and model building on
    this machine, this one ~0.2 ms.
    """
    stale_before = timezone.now() - LAST_USED_RESOLUTION
    with connection.cursor() as cursor:
        cursor.execute(
            _key_sql(), [connection.ops.adapt_datetimefield_value(stale_before), key_hash]
        )
        row = cursor.fetchone()
    if row is None:
        return None
    key_id, job_id, user_id, prefix, revoked, stale, owner_id, status, active, staff = row
    return _KeyRow(
        key_id, job_id, user_id, prefix, bool(revoked), bool(stale), owner_id, status,
        bool(active), bool(staff),
    )  # fmt: skip
