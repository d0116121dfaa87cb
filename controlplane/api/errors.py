"""One error shape for every 4xx: ``{"errors": [{"field": ..., "reason": ...}]}``.

Nested validation errors are flattened into dotted paths, list items indexed
(``items[17].demand.cpu.min``); a malformed body names ``body``; auth failures name
``Authorization``. DESIGN.md "Not negotiable": bad input gets the field and the reason, never a 500.

A backing service that cannot be reached (PostgreSQL, Redis) is a 503 with ``Retry-After``: the
client retries. An exception no one expected still gets this shape (a 500 with a generic reason,
logged with its traceback), whatever ``DEBUG`` says: an API client never receives Django's HTML
debug page, which would show it source, settings and local variables.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
)
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import DataError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

logger = logging.getLogger(__name__)
# Where Django itself logs unhandled exceptions: operators' handlers (mail, Sentry) listen there.
request_logger = logging.getLogger("django.request")

BODY = "body"
SERVER_ERROR_REASON = "internal error; see the server log"
RETRY_AFTER_S = 1


class ApiError(exceptions.APIException):
    """A 4xx about one field, raised by views when a service refuses a request."""

    def __init__(self, *, field: str, reason: str, status_code: int = status.HTTP_400_BAD_REQUEST):
        super().__init__(detail=reason)
        self.field = field
        self.reason = reason
        self.status_code = status_code


class Conflict(ApiError):
    def __init__(self, *, field: str, reason: str):
        super().__init__(field=field, reason=reason, status_code=status.HTTP_409_CONFLICT)


def join_field(prefix: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    if key in ("non_field_errors", "__all__"):
        return prefix
    if key.startswith("["):
        return f"{prefix}{key}"
    return f"{prefix}.{key}" if prefix else key


def flatten_errors(detail: Any, prefix: str = "") -> Iterator[dict[str, str]]:
    """Yield ``{"field", "reason"}`` for every leaf of a DRF validation error detail."""
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            yield from flatten_errors(
                value, join_field(prefix, key if isinstance(key, int) else str(key))
            )
    elif isinstance(detail, list):
        if all(isinstance(item, str) for item in detail):
            for item in detail:
                yield {"field": prefix or BODY, "reason": str(item)}
        else:
            for index, item in enumerate(detail):
                if item in ({}, [], None):
                    continue  # a valid item in a list of per-item errors
                yield from flatten_errors(item, join_field(prefix, index))
    else:
        yield {"field": prefix or BODY, "reason": str(detail)}


def _field_for(exc: exceptions.APIException, context: Mapping[str, Any]) -> str:
    if isinstance(exc, ApiError):
        return exc.field
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        return "Authorization"
    if isinstance(exc, exceptions.PermissionDenied):
        return "Authorization"
    if isinstance(exc, exceptions.NotFound):
        kwargs = getattr(context.get("view"), "kwargs", None) or {}
        return next(iter(kwargs), "path")
    if isinstance(exc, exceptions.MethodNotAllowed):
        return "method"
    if isinstance(exc, exceptions.UnsupportedMediaType):
        return "Content-Type"
    if isinstance(exc, exceptions.NotAcceptable):
        return "Accept"
    if isinstance(exc, exceptions.Throttled):
        return "rate"
    return BODY


def suspicious_field(exc: SuspiciousOperation) -> str:
    """What a request Django refuses as suspicious got wrong."""
    if isinstance(exc, DisallowedHost):
        return "Host"
    if isinstance(exc, TooManyFieldsSent):
        return "query"
    if isinstance(exc, RequestDataTooBig):
        return BODY
    return "request"


def suspicious_reason(exc: SuspiciousOperation) -> str:
    """Django's reason, naming the setting an operator of Loom sets (its environment variable,
    not Django's ``ALLOWED_HOSTS``)."""
    reason = str(exc) or "refused as suspicious"
    if isinstance(exc, DisallowedHost):
        return reason.replace("to ALLOWED_HOSTS.", "to LOOM_ALLOWED_HOSTS (comma-separated).")
    return reason


def _set_rollback() -> None:
    # Imported late: rest_framework.views loads the parser classes, and our parser imports this
    # module, so importing it at the top fails whenever this module is imported first.
    from rest_framework.views import set_rollback

    set_rollback()


def unavailable_service(exc: BaseException) -> str | None:
    """``"database"`` or ``"Redis"`` when ``exc`` says that backing service cannot be reached
    (restarting, failed over, network cut): the request may succeed again shortly."""
    import redis

    if isinstance(exc, OperationalError | InterfaceError):
        return "database"
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | redis.BusyLoadingError):
        return "Redis"
    return None


def exception_handler(exc: Exception, context: Mapping[str, Any]) -> Response:
    """DRF EXCEPTION_HANDLER producing the error shape, for every exception a view raises."""
    if service := unavailable_service(exc):
        # Not the client's fault and not a bug: a 503 the SDK retries (with its idempotency key).
        logger.warning("%s unavailable: %s", service, exc)
        _set_rollback()
        reason = f"{service} unavailable; retry shortly"
        return Response(
            error_body(field="server", reason=reason),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound("not found (or not visible to this key)")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    elif isinstance(exc, DataError):
        # Last line of defence: serializers bound every value, but the database is the judge.
        logger.warning("DataError reached the API: %s", exc)
        _set_rollback()
        exc = ApiError(field=BODY, reason=f"a value does not fit the database: {exc}".strip())
    elif isinstance(exc, SuspiciousOperation):
        exc = ApiError(field=suspicious_field(exc), reason=suspicious_reason(exc))
    if not isinstance(exc, exceptions.APIException):
        request = context.get("request")
        request_logger.error(
            "Internal Server Error: %s",
            getattr(request, "path", "?"),
            exc_info=exc,
            extra={"status_code": 500, "request": getattr(request, "_request", request)},
        )
        _set_rollback()
        response = Response(
            error_body(field="server", reason=SERVER_ERROR_REASON),
            status=status.HTTP_500_INTERNAL_SERVER_ERROR,
        )
        # Logged with its traceback above; Django would log it again, without.
        setattr(response, "_has_been_logged", True)  # noqa: B010
        return response

    headers: dict[str, str] = {}
    if auth_header := getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = auth_header
    if wait := getattr(exc, "wait", None):
        headers["Retry-After"] = str(int(wait))

    if isinstance(exc, exceptions.ValidationError):
        errors = list(flatten_errors(exc.detail))
    elif isinstance(exc, exceptions.ParseError):
        errors = [{"field": BODY, "reason": f"malformed JSON: {exc.detail}"}]
    else:
        reason = exc.reason if isinstance(exc, ApiError) else str(exc.detail)
        errors = [{"field": _field_for(exc, context), "reason": reason}]
    if not errors:
        errors = [{"field": BODY, "reason": "invalid request"}]
    _set_rollback()
    return Response({"errors": errors}, status=exc.status_code, headers=headers)


def error_body(*, field: str, reason: str) -> dict[str, list[dict[str, str]]]:
    """The error shape with one error; views, middleware and the HTTP bridge all build it here."""
    return {"errors": [{"field": field, "reason": reason}]}


def error_response(*, field: str, reason: str, status_code: int) -> JsonResponse:
    return JsonResponse(error_body(field=field, reason=reason), status=status_code)


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler400: what Django refuses before a view runs (a bad Host, too many fields)."""
    if isinstance(exception, SuspiciousOperation):
        field, reason = suspicious_field(exception), suspicious_reason(exception)
    else:
        field, reason = "request", "bad request"
    return error_response(field=field, reason=reason, status_code=400)


def permission_denied_view(
    request: HttpRequest, exception: Exception | None = None
) -> HttpResponse:
    return error_response(
        field="Authorization", reason="not allowed (or not visible to this key)", status_code=403
    )


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(field="path", reason=f"no such URL: {request.path}", status_code=404)


def server_error_view(request: HttpRequest) -> HttpResponse:
    return error_response(field="server", reason=SERVER_ERROR_REASON, status_code=500)
