"""Errors the SDK raises. Every HTTP 4xx from Loom carries ``errors: [{field, reason}]``."""

from __future__ import annotations

from typing import Any


class LoomError(Exception):
    """Base class of everything the SDK raises."""


class ApiError(LoomError):
    """Loom answered with a 4xx/5xx; ``errors`` lists each field and reason it named."""

    def __init__(self, status_code: int, body: Any) -> None:
        self.status_code = status_code
        self.body = body
        self.errors: list[dict[str, str]] = _field_errors(body)
        summary = "; ".join(f"{e.get('field', '?')}: {e.get('reason', '')}" for e in self.errors)
        super().__init__(f"HTTP {status_code}: {summary or body!r}")


class AuthenticationError(ApiError):
    """401/403: a wrong or revoked API key."""


class NotFoundError(ApiError):
    """404: no such object, or one that belongs to another job."""


class TransientError(LoomError):
    """A failure worth retrying (connection refused, 429, 502-504) that outlived the retries."""


class ResultTimeout(LoomError):
    """``result()`` / ``as_completed()`` ran out of time before the action ended."""


def _field_errors(body: Any) -> list[dict[str, str]]:
    if isinstance(body, dict) and isinstance(body.get("errors"), list):
        return [e for e in body["errors"] if isinstance(e, dict)]
    return []
