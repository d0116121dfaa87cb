"""``loom.Client``: the synchronous SDK a trainer imports."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import httpx

from loom import protocol
from loom.aio import AsyncClient
from loom.coalesce import LoopThread
from loom.errors import ResultTimeout, TransientError
from loom.types import Action


class Client:
    """Submit actions, await their results, cancel them.

    >>> client = Client("http://127.0.0.1:8000", api_key="loom_...")
    >>> action = client.submit(command="pytest -q -n {dop}", demand={"cpu": {"min": 1, "max": 8}})
    >>> client.result(action.id, timeout=600).exit_code

    Safe to share between threads. ``submit()``, ``run()`` and ``result()`` made while another
    call of this client is in flight run as ``AsyncClient`` calls on a loop thread of the
    client's own, where concurrent calls coalesce into batched requests (``loom.coalesce``); a
    call made alone is its own request, as always. ``coalesce=False``, or a custom
    ``transport`` (it serves this client's own requests only): one request per call.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 60.0,
        retry: protocol.RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        coalesce: bool = True,
    ) -> None:
        self._retry = retry or protocol.RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url,
            headers=protocol.auth_headers(api_key),
            timeout=httpx.Timeout(timeout_s + protocol.MAX_WAIT_PER_POLL_S),
            transport=transport,
        )
        self._coalesce = coalesce and transport is None
        self._async_args = (base_url, api_key, timeout_s, self._retry)
        self._lock = threading.Lock()
        self._calls_in_flight = 0
        self._shared: tuple[LoopThread, AsyncClient] | None = None
        self._shared_pid = os.getpid()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            shared, self._shared = self._shared, None
        if shared is not None:
            loop, client = shared
            loop.call(client.close())
            loop.close()
        self._http.close()

    @contextlib.contextmanager
    def _call(self) -> Iterator[tuple[LoopThread, AsyncClient] | None]:
        """Count a call while it runs; give it the shared loop and client if another call is in
        flight (it then runs there, coalesced), else None (it sends its own request)."""
        with self._lock:
            shared = None
            if self._shared_pid != os.getpid():
                # A forked child has the parent's loop object but not its thread: start afresh.
                self._shared, self._shared_pid = None, os.getpid()
            if self._coalesce and self._calls_in_flight > 0:
                if self._shared is None:
                    base_url, api_key, timeout_s, retry = self._async_args
                    client = AsyncClient(base_url, api_key, timeout_s=timeout_s, retry=retry)
                    self._shared = (LoopThread("loom-sdk-coalesce"), client)
                shared = self._shared
            self._calls_in_flight += 1
        try:
            yield shared
        finally:
            with self._lock:
                self._calls_in_flight -= 1

    def _send(self, request: protocol.Request) -> httpx.Response:
        last_error: str = ""
        for attempt in range(self._retry.attempts):
            try:
                response = self._http.request(
                    request.method, request.path, json=request.json, params=request.params
                )
            except httpx.TransportError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                time.sleep(self._retry.delay(attempt))
                continue
            if protocol.is_transient(response):
                last_error = f"HTTP {response.status_code}"
                time.sleep(self._retry.delay(attempt, response.headers.get("Retry-After")))
                continue
            protocol.raise_for_status(response)
            return response
        raise TransientError(f"{request.method} {request.path} failed: {last_error}")

    def submit(self, **fields: Any) -> Action:
        """Submit one action; keyword arguments as :func:`loom.protocol.action_payload`."""
        with self._call() as shared:
            if shared is not None:
                loop, client = shared
                return loop.call(client.submit(**fields))
            body = protocol.action_payload(**fields)
            return protocol.parse_action(self._send(protocol.submit_request(body)))

    def run(self, *, timeout: float = 600.0, **fields: Any) -> Action:
        """Submit one action and return it ended: one request when it ends within
        ``MAX_WAIT_PER_POLL_S`` (submit-and-wait), long-polls for the rest of ``timeout``.
        Retrying a lost answer is safe: the submission carries an idempotency key."""
        with self._call() as shared:
            if shared is not None:
                loop, client = shared
                return loop.call(client.run(timeout=timeout, **fields))
            deadline = time.monotonic() + timeout
            body = protocol.action_payload(**fields)
            wait = min(timeout, protocol.MAX_WAIT_PER_POLL_S)
            action = protocol.parse_action(self._send(protocol.submit_request(body, wait_s=wait)))
            if action.done:
                return action
            return self._result_alone(action.id, max(0.0, deadline - time.monotonic()))

    def submit_batch(self, items: Sequence[Mapping[str, Any]]) -> list[Action]:
        """Submit up to 10 000 actions at once, validated all-or-nothing by the server."""
        request = protocol.submit_batch_request(protocol.with_idempotency_keys(items))
        return protocol.parse_actions(self._send(request))

    def get(self, action_id: int) -> Action:
        return protocol.parse_action(self._send(protocol.get_request(action_id)))

    def cancel(self, action_id: int) -> Action:
        return protocol.parse_action(self._send(protocol.cancel_request(action_id)))

    def result(self, action_id: int, *, timeout: float = 600.0) -> Action:
        """Block until the action ends (long-poll, no client-side busy loop)."""
        with self._call() as shared:
            if shared is not None:
                loop, client = shared
                return loop.call(client.result(action_id, timeout=timeout))
            return self._result_alone(action_id, timeout)

    def _result_alone(self, action_id: int, timeout: float) -> Action:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            request = protocol.result_request(action_id, min(remaining, 30))
            ended = protocol.parse_result(self._send(request))
            if ended is not None:
                return ended
        raise ResultTimeout(f"action {action_id} did not end within {timeout} s")

    def as_completed(
        self, action_ids: Iterable[int], *, timeout: float = 600.0
    ) -> Iterator[Action]:
        """Yield actions as they end, in completion order."""
        pending = list(dict.fromkeys(action_ids))
        deadline = time.monotonic() + timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ResultTimeout(f"{len(pending)} actions did not end within {timeout} s")
            window = pending[: protocol.MAX_AWAIT_IDS]
            request = protocol.await_many_request(window, min(remaining, 30))
            ended = protocol.parse_await_many(self._send(request))
            pending = protocol.next_pending(pending, len(window), ended)
            yield from ended
