"""One Redis client per URL per process (redis-py clients are thread-safe connection pools)."""

from __future__ import annotations

import functools
import os

import redis
from django.conf import settings


@functools.cache
def redis_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def configured_redis() -> redis.Redis | None:
    """The client for ``settings.REDIS_URL``; None in the embedded mode (no Redis)."""
    url: str | None = getattr(settings, "REDIS_URL", None)
    return redis_client(url) if url else None


def key_prefix() -> str:
    """Prefix of Loom's Redis keys: ``settings.LOOM_STREAM_PREFIX``, else the environment's."""
    configured = getattr(settings, "LOOM_STREAM_PREFIX", None)
    return str(configured or os.environ.get("LOOM_STREAM_PREFIX") or "loom")
