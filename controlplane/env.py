"""Typed environment variables for Loom's settings.

Every setting that differs between the embedded demo and production is read here, and a malformed
value stops start-up with an ``ImproperlyConfigured`` that names the variable (STYLE.md §4).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str) -> str:
    """The variable's value, or ``default`` when it is unset or empty."""
    value = _raw(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name}: expected a boolean (true/false/1/0), got {value!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}: expected an integer, got {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}: must be ≥ {minimum}, got {number}")
    return number


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blanks between commas are an error, not silently dropped."""
    value = _raw(name)
    if value is None:
        return list(default)
    items = [item.strip() for item in value.split(",")]
    if any(item == "" for item in items):
        raise ImproperlyConfigured(f"{name}: empty item in comma-separated list {value!r}")
    return items


def env_log_level(name: str, default: str) -> str:
    value = env_str(name, default).upper()
    if value not in LOG_LEVELS:
        raise ImproperlyConfigured(
            f"{name}: expected one of {', '.join(LOG_LEVELS)}, got {value!r}"
        )
    return value


def database_from_url(name: str, url: str | None, *, sqlite_path: Path) -> dict[str, Any]:
    """Django DATABASES['default'] from a URL: unset → SQLite at ``sqlite_path``.

    Accepted: ``postgres://user:password@host:port/name?sslmode=...`` (also ``postgresql://``)
    and ``sqlite:///absolute/path`` or ``sqlite://:memory:``.
    """
    if url is None:
        return _sqlite(str(sqlite_path))
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: malformed URL {url!r} ({error})") from None
    if parts.scheme in ("postgres", "postgresql", "pgsql"):
        database = unquote(parts.path.lstrip("/"))
        if not database or "/" in database:
            raise ImproperlyConfigured(
                f"{name}: a PostgreSQL URL needs a database name, "
                f"e.g. postgres://user@host:5432/loom; got {url!r}"
            )
        options: dict[str, Any] = dict(parse_qsl(parts.query, keep_blank_values=False))
        # Under ASGI every request runs on a fresh thread, so per-thread persistent connections
        # are never reused: a pool hands each request a warm connection (and caps the total).
        if env_bool("LOOM_DB_POOL", True):
            options["pool"] = {
                "min_size": 2,
                "max_size": env_int("LOOM_DB_POOL_SIZE", 32, minimum=2),
                "timeout": 30,
            }
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": database,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "OPTIONS": options,
            "CONN_MAX_AGE": 0 if "pool" in options else 60,
            "CONN_HEALTH_CHECKS": "pool" not in options,
        }
    if parts.scheme == "sqlite":
        path = url[len("sqlite://") :]
        if path in ("", "/"):
            raise ImproperlyConfigured(f"{name}: sqlite URL needs a path, e.g. sqlite:///var/x.db")
        if path == "/:memory:" or path == ":memory:":
            path = ":memory:"
        return _sqlite(path)
    raise ImproperlyConfigured(
        f"{name}: unsupported scheme {parts.scheme!r} in {url!r} (use postgres:// or sqlite://)"
    )


def _sqlite(path: str) -> dict[str, Any]:
    """SQLite for the embedded mode, where the scheduler writes while the API serves: WAL lets
    readers run beside the writer, IMMEDIATE transactions and a busy timeout queue writers
    instead of failing them with "database is locked"."""
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


def redis_url(name: str) -> str | None:
    """The Redis URL, or None for the embedded mode (no Redis at all)."""
    url = _raw(name)
    if url is None:
        return None
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a non-numeric port
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: malformed URL {url!r} ({error})") from None
    if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
        raise ImproperlyConfigured(f"{name}: expected redis://host:port/db, got {url!r}")
    return url


def secret_key(name: str, *, keep_in: Path | None) -> str:
    """LOOM_SECRET_KEY, or (demo/dev only) one generated once and kept in ``keep_in``."""
    value = _raw(name)
    if value is not None:
        if len(value) < 32:
            raise ImproperlyConfigured(f"{name}: must be at least 32 characters long")
        return value
    if keep_in is None:
        raise ImproperlyConfigured(f"{name}: required in production (at least 32 characters)")
    if keep_in.exists():
        return keep_in.read_text().strip()
    keep_in.parent.mkdir(parents=True, exist_ok=True)
    generated = secrets.token_urlsafe(50)
    keep_in.write_text(generated + "\n")
    keep_in.chmod(0o600)
    return generated
