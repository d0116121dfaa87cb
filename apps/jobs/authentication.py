"""``Authorization: Bearer <key>`` authentication for job keys and staff keys."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from apps.jobs.models import ApiKey

KEY_PREFIX = "loom_"
NODE_TOKEN_PREFIX = "loomnode_"
LAST_USED_RESOLUTION = timedelta(minutes=1)


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
        key = (
            ApiKey.objects.select_related("job__owner", "user")
            .filter(key_hash=hash_key(token))
            .first()
        )
        if key is None:
            raise exceptions.AuthenticationFailed("unknown API key")
        if key.revoked_at is not None:
            raise exceptions.AuthenticationFailed(
                f"API key {key.prefix}… was revoked at {key.revoked_at.isoformat()}"
            )
        user: Any
        if key.job is not None:
            user = key.job.owner
        else:
            user = key.user
            if user is None or not user.is_active or not user.is_staff:
                raise exceptions.AuthenticationFailed(
                    f"API key {key.prefix}… belongs to a user who is no longer active staff"
                )
        now = timezone.now()
        if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
            ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
        return user, key
