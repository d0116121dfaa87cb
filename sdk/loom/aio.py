"""``loom.AsyncClient``: the asyncio twin of :class:`loom.Client` (same protocol module), with
concurrent ``submit()``/``result()``/``run()`` calls coalesced into batched requests
(:mod:`loom.coalesce`)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any

import httpx

from loom import protocol
from loom.coalesce import ResultCoalescer, SubmitCoalescer
from loom.errors import ResultTimeout, TransientError
from loom.types import Action


class AsyncClient:
    """``async with AsyncClient(url, api_key=...) as client: await client.submit(...)``.

    Calls made concurrently (trajectories as coroutines, each awaiting its own tool calls) share
    requests: submits made while one is in flight go out as one batch, results awaited together
    share one long-poll. A call made alone goes out alone, as its single request. Each caller
    still gets its own action, error and timeout. ``coalesce=False``: one request per call.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 60.0,
        retry: protocol.RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        coalesce: bool = True,
    ) -> None:
        self._retry = retry or protocol.RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers=protocol.auth_headers(api_key),
            timeout=httpx.Timeout(timeout_s + protocol.MAX_WAIT_PER_POLL_S),
            transport=transport,
        )
        self._coalesce = coalesce
        self._submits = SubmitCoalescer(self._submit_one, self._submit_many)
        self._results = ResultCoalescer(self._await_many, protocol.MAX_WAIT_PER_POLL_S)
        self._lone_waits = 0  # single-request long-polls in flight (made while nothing else was)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._results.close()
        await self._http.aclose()

    async def _send(self, request: protocol.Request) -> httpx.Response:
        last_error = ""
        for attempt in range(self._retry.attempts):
            try:
                response = await self._http.request(
                    request.method, request.path, json=request.json, params=request.params
                )
            except httpx.TransportError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
                await asyncio.sleep(self._retry.delay(attempt))
                continue
            if protocol.is_transient(response):
                last_error = f"HTTP {response.status_code}"
                await asyncio.sleep(self._retry.delay(attempt, response.headers.get("Retry-After")))
                continue
            protocol.raise_for_status(response)
            return response
        raise TransientError(f"{request.method} {request.path} failed: {last_error}")

    async def submit(self, **fields: Any) -> Action:
        body = protocol.action_payload(**fields)
        if self._coalesce:
            return await self._submits.submit(body)
        return await self._submit_one(body)

    async def run(self, *, timeout: float = 600.0, **fields: Any) -> Action:
        """Submit one action and return it ended: one request when it ends within
        ``MAX_WAIT_PER_POLL_S`` (submit-and-wait), long-polls for the rest of ``timeout``.
        Retrying a lost answer is safe: the submission carries an idempotency key. Alongside
        other calls in flight it is a coalesced submit, then a coalesced result."""
        deadline = time.monotonic() + timeout
        body = protocol.action_payload(**fields)
        if self._coalesce and self._busy():
            action = await self._submits.submit(body)
        else:
            wait = min(timeout, protocol.MAX_WAIT_PER_POLL_S)
            with self._lone_wait():
                action = protocol.parse_action(
                    await self._send(protocol.submit_request(body, wait_s=wait))
                )
        if action.done:
            return action
        return await self.result(action.id, timeout=max(0.0, deadline - time.monotonic()))

    async def submit_batch(self, items: Sequence[Mapping[str, Any]]) -> list[Action]:
        request = protocol.submit_batch_request(protocol.with_idempotency_keys(items))
        return protocol.parse_actions(await self._send(request))

    async def get(self, action_id: int) -> Action:
        return protocol.parse_action(await self._send(protocol.get_request(action_id)))

    async def cancel(self, action_id: int) -> Action:
        return protocol.parse_action(await self._send(protocol.cancel_request(action_id)))

    async def result(self, action_id: int, *, timeout: float = 600.0) -> Action:
        if self._coalesce and self._busy():
            try:
                return await asyncio.wait_for(self._results.result(action_id), timeout)
            except TimeoutError:
                raise ResultTimeout(f"action {action_id} did not end within {timeout} s") from None
        with self._lone_wait():
            return await self._result_alone(action_id, timeout)

    async def _result_alone(self, action_id: int, timeout: float) -> Action:
        deadline = time.monotonic() + timeout
        while (remaining := deadline - time.monotonic()) > 0:
            request = protocol.result_request(action_id, min(remaining, 30))
            ended = protocol.parse_result(await self._send(request))
            if ended is not None:
                return ended
        raise ResultTimeout(f"action {action_id} did not end within {timeout} s")

    async def as_completed(
        self, action_ids: Iterable[int], *, timeout: float = 600.0
    ) -> AsyncIterator[Action]:
        pending = list(dict.fromkeys(action_ids))
        deadline = time.monotonic() + timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ResultTimeout(f"{len(pending)} actions did not end within {timeout} s")
            window = pending[: protocol.MAX_AWAIT_IDS]
            request = protocol.await_many_request(window, min(remaining, 30))
            ended = protocol.parse_await_many(await self._send(request))
            pending = protocol.next_pending(pending, len(window), ended)
            for action in ended:
                yield action

    # --- the requests coalesced calls share (loom.coalesce) ----------------------------------

    def _busy(self) -> bool:
        """Another call is in flight: a new one joins the coalesced requests."""
        return self._lone_waits > 0 or self._submits.busy or self._results.busy

    @contextlib.contextmanager
    def _lone_wait(self) -> Iterator[None]:
        self._lone_waits += 1
        try:
            yield
        finally:
            self._lone_waits -= 1

    async def _submit_one(self, body: dict[str, Any]) -> Action:
        return protocol.parse_action(await self._send(protocol.submit_request(body)))

    async def _submit_many(self, bodies: list[dict[str, Any]]) -> list[Action]:
        request = protocol.submit_batch_request(bodies, representation="full")
        return protocol.parse_actions(await self._send(request))

    async def _await_many(self, action_ids: list[int], wait_s: float) -> list[Action]:
        request = protocol.await_many_request(action_ids, wait_s)
        return protocol.parse_await_many(await self._send(request))
