"""Request metrics for every HTTP request (sync and async, no thread hop under ASGI)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from apps.metrics.instruments import HTTP_DURATION, HTTP_REQUESTS


def _route(request: HttpRequest) -> str:
    """The URL pattern, not the path, so ids do not explode the label set."""
    match = getattr(request, "resolver_match", None)
    return match.route if match is not None and match.route else "unmatched"


def _record(request: HttpRequest, response: HttpResponseBase, started: float) -> None:
    route = _route(request)
    HTTP_DURATION.labels(request.method or "?", route).observe(time.perf_counter() - started)
    HTTP_REQUESTS.labels(request.method or "?", route, str(response.status_code)).inc()


class RequestMetricsMiddleware:
    """Counts requests and times them, labelled by method, URL route and status."""

    sync_capable = True
    async_capable = True

    def __init__(
        self,
        get_response: Callable[[HttpRequest], HttpResponseBase]
        | Callable[[HttpRequest], Awaitable[HttpResponseBase]],
    ) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> HttpResponseBase | Awaitable[HttpResponseBase]:
        if self.is_async:
            return self._acall(request)
        started = time.perf_counter()
        response = self.get_response(request)
        assert isinstance(response, HttpResponseBase)
        _record(request, response, started)
        return response

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = await self.get_response(request)  # type: ignore[misc]
        _record(request, response, started)
        return response
