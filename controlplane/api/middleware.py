"""API paths answer in the error shape, whatever fails and whatever ``DEBUG`` says.

Views already do (``controlplane.api.errors.exception_handler``). This middleware, the outermost,
covers what happens around them: a Host that ``ALLOWED_HOSTS`` refuses (checked here, before
any other middleware asks), a query string with too many fields, an unknown query parameter
(``controlplane.api.query``), a URL no route matches, an exception in another middleware. With
``DEBUG`` on, Django answers those with its HTML debug pages — source, settings, local
variables — so any HTML error response on an API path is replaced by the JSON error shape here
(Django has already logged what it replaces).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponseBase
from django.middleware.common import CommonMiddleware
from rest_framework.views import APIView

from controlplane.api.errors import (
    SERVER_ERROR_REASON,
    error_response,
    suspicious_field,
    suspicious_reason,
)
from controlplane.api.query import unknown_query_param

API_PREFIXES = ("/api/", "/dashboard/api/")
# Only Loom's own REST views check their query strings (the schema and docs views are DRF's).
CHECKED_VIEW_MODULES = ("apps.",)

REASONS = {
    400: "bad request",
    401: "authentication required",
    403: "not allowed (or not visible to this key)",
    405: "method not allowed",
    413: "request too large",
}


def is_api_path(path: str) -> bool:
    return path.startswith(API_PREFIXES)


class ApiErrorsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response
        # Asked only whether a path lacks its slash (APPEND_SLASH): with DEBUG on, Django raises
        # for a POST there (a 500); without, it redirects, and the client re-sends it as a GET.
        self.slash_check = CommonMiddleware(get_response)

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if not is_api_path(request.path):
            return self.get_response(request)
        try:
            request.get_host()
            request.GET  # noqa: B018  (parse now: TooManyFieldsSent is a 400 of ours)
        except SuspiciousOperation as error:
            field, reason = suspicious_field(error), suspicious_reason(error)
            return error_response(field=field, reason=reason, status_code=400)
        if request.method not in ("GET", "HEAD") and self.slash_check.should_redirect_with_slash(
            request
        ):
            reason = f"no such URL: {request.path} (this API's paths end in /)"
            return error_response(field="path", reason=reason, status_code=404)
        response = self.get_response(request)
        if response.status_code >= 400 and not _is_json(response):
            return _as_error_shape(request, response)
        return response

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponseBase | None:
        view_cls = getattr(view_func, "cls", None)
        if not (
            is_api_path(request.path)
            and isinstance(view_cls, type)
            and issubclass(view_cls, APIView)
            and view_cls.__module__.startswith(CHECKED_VIEW_MODULES)
        ):
            return None
        actions = getattr(view_func, "actions", None)
        unknown = unknown_query_param(list(request.GET), view_cls, request.method or "GET", actions)
        if unknown is None:
            return None
        name, reason = unknown
        return error_response(field=name, reason=reason, status_code=400)


def _is_json(response: HttpResponseBase) -> bool:
    return str(response.get("Content-Type", "")).startswith("application/json")


def _as_error_shape(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    code = response.status_code
    if code >= 500:
        field, reason = "server", SERVER_ERROR_REASON
    elif code == 404:
        field, reason = "path", f"no such URL: {request.path}"
    else:
        field, reason = "request", REASONS.get(code, "refused")
    replacement = error_response(field=field, reason=reason, status_code=code)
    for header in ("Allow", "WWW-Authenticate", "Retry-After"):
        if header in response:
            replacement[header] = response[header]
    return replacement
