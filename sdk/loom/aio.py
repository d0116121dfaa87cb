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

from loom import buffers, groups, protocol, trajectories
from loom.coalesce import ResultCoalescer, SubmitCoalescer
from loom.errors import LoomError, ResultTimeout, TransientError
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
        llm_url: str | None = None,
    ) -> None:
        self._retry = retry or protocol.RetryPolicy()
        self._api_key = api_key
        # Loom's LLM router (its base URL, without /v1): generate() and stream() go there.
        self._llm = (
            None
            if llm_url is None
            else httpx.AsyncClient(base_url=llm_url, timeout=httpx.Timeout(timeout_s * 10))
        )
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
        if self._llm is not None:
            await self._llm.aclose()

    async def _send(self, request: protocol.Request, *, retry: bool = True) -> httpx.Response:
        """``retry=False``: one attempt (a push must not be applied twice)."""
        last_error = ""
        for attempt in range(self._retry.attempts if retry else 1):
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

    # --- trajectories and their LLM turns (heddle §4), see loom.trajectories ---------------

    async def create_trajectory(self, **fields: Any) -> trajectories.Trajectory:
        """Register a trajectory (``training_step``, ``prompt_id``, ``group_id``,
        ``sample_index``); sent once: a retried create could register two."""
        request = trajectories.create_request(fields)
        return trajectories.parse_trajectory(await self._send(request, retry=False))

    async def get_trajectory(self, trajectory_id: int) -> trajectories.Trajectory:
        return trajectories.parse_trajectory(
            await self._send(trajectories.get_request(trajectory_id))
        )

    async def end_trajectory(
        self, trajectory_id: int, *, status: str = "finished", reward: float | None = None
    ) -> trajectories.Trajectory:
        """End it (finished, aborted or failed) with its reward; the router then refuses it.
        With ``llm_url``, on the router first (see ``trajectories.router_end``); a router that
        cannot be reached does not keep the trajectory from ending."""
        if self._llm is not None:
            path, body = trajectories.router_end(trajectory_id, status)
            headers = trajectories.llm_headers(self._api_key, trajectory_id)
            with contextlib.suppress(httpx.TransportError):
                response = await self._llm.post(path, json=body, headers=headers)
                trajectories.router_end_answered(response)
        request = trajectories.end_request(trajectory_id, status, reward)
        return trajectories.parse_trajectory(await self._send(request))

    async def generate(
        self,
        trajectory_id: int,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        **options: Any,
    ) -> trajectories.Turn:
        """One LLM turn of the trajectory through the router (``options``: max_tokens,
        temperature, seed, ignore_eos, ...)."""
        response = await self._llm_client().post(
            trajectories.CHAT,
            json=trajectories.chat_body(model, messages, options, stream=False),
            headers=trajectories.llm_headers(self._api_key, trajectory_id),
        )
        return trajectories.parse_turn(response)

    async def stream(
        self,
        trajectory_id: int,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        **options: Any,
    ) -> AsyncIterator[str]:
        """One LLM turn, its text yielded as the engine decodes it."""
        async with self._llm_client().stream(
            "POST",
            trajectories.CHAT,
            json=trajectories.chat_body(model, messages, options, stream=True),
            headers=trajectories.llm_headers(self._api_key, trajectory_id),
        ) as response:
            if response.status_code >= 400:
                await response.aread()
                trajectories.raise_for_llm_status(response)
            async for line in response.aiter_lines():
                delta = trajectories.stream_delta(line)
                if delta is None:
                    return
                if delta:
                    yield delta

    def group_rollout(
        self,
        prompts: Sequence[groups.Prompt],
        *,
        model: str,
        group_size: int,
        budget: str | Mapping[str, Any] = "adaptive",
        token_chunk: int = 0,
        on_tokens: groups.TokensCallback | None = None,
        **sampling: Any,
    ) -> groups.AsyncGroupRollout:
        """A DARTS group rollout through the router (darts §4): ``group_size`` (M) kept samples
        per prompt from a redundant candidate pool sized by ``budget`` (``adaptive``, ``standard``,
        or ``{"policy": "fixed", "total": ...}``); ``sampling``: max_tokens, temperature, seed,
        ... Iterate the result for the kept samples as they stream, then read its
        ``statistics`` (see ``loom.groups``). ``token_chunk``: ``on_tokens`` gets every
        candidate's text in pieces of about that many tokens while it decodes (§4.3.2)."""
        body = groups.group_body(
            prompts, model=model, group_size=group_size, budget=budget, sampling=sampling,
            stream=True, token_chunk=token_chunk,
        )  # fmt: skip
        return groups.AsyncGroupRollout(self._llm_client(), body, self._api_key, on_tokens)

    def _llm_client(self) -> httpx.AsyncClient:
        if self._llm is None:
            raise LoomError("no LLM router: create the client with llm_url=...")
        return self._llm

    # --- buffers (artos §4): definitions and experience, see loom.buffers -------------------

    async def declare_buffer(self, **fields: Any) -> buffers.Buffer:
        """Declare a buffer; keyword arguments as :func:`loom.buffers.declare_request`."""
        request = buffers.declare_request(**fields)
        return buffers.parse_buffer(await self._send(request))

    async def declare_workflow(
        self, definition: Any, *, job: int | None = None
    ) -> list[buffers.Buffer]:
        """Declare a workflow's buffers and triggers, all or none: a ``Workflow`` or its
        ``to_json()``."""
        request = buffers.declare_workflow_request(definition, job)
        return buffers.parse_buffers(await self._send(request))

    async def list_buffers(self) -> list[buffers.Buffer]:
        """Every buffer this key sees (its job's; staff: all), newest first."""
        found: list[buffers.Buffer] = []
        request: protocol.Request | None = buffers.list_request()
        while request is not None:
            page, request = buffers.next_page(await self._send(request))
            found += page
        return found

    async def get_buffer(self, buffer_id: int) -> buffers.Buffer:
        return buffers.parse_buffer(await self._send(buffers.get_request(buffer_id)))

    async def delete_buffer(self, buffer_id: int) -> None:
        await self._send(buffers.delete_request(buffer_id))

    async def push(self, buffer_id: int, actor: str, records: Mapping[str, Any]) -> dict[str, int]:
        """Append steps for ``actor`` (data key → one entry per step); returns ``steps`` and the
        trigger ``firings`` it caused. Sent once, never retried: a retried push whose first
        attempt did land would store its steps twice."""
        request = buffers.push_request(buffer_id, actor, records)
        body: dict[str, int] = (await self._send(request, retry=False)).json()
        return body

    async def gather(
        self, buffer_id: int, slices: Mapping[str, tuple[int, int]], keys: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Steps ``[start, stop)`` of each actor (what a DataKeyTrigger's firing names)."""
        request = buffers.gather_request(buffer_id, slices, keys)
        records: dict[str, Any] = (await self._send(request)).json()["records"]
        return records

    async def sample(
        self,
        buffer_id: int,
        batch_size: int | None = None,
        keys: Iterable[str] = (),
        **options: Any,
    ) -> buffers.Sample:
        """A batch drawn with the buffer's sampler (full batch: every complete step, once);
        ``options``: the n-step or FIFO-per-actor sampler's (``buffers.sample_request``)."""
        request = buffers.sample_request(buffer_id, batch_size, keys, **options)
        return buffers.parse_sample(await self._send(request, retry=False))

    async def update_priorities(self, buffer_id: int, slots: Sequence[int], td_errors: Any) -> int:
        """PER: new priorities |δ| + ε for the slots a prioritised sample returned."""
        request = buffers.priorities_request(buffer_id, slots, td_errors)
        return int((await self._send(request)).json()["updated"])

    async def buffer_stats(self, buffer_id: int) -> dict[str, Any]:
        """Fill level, counters and trigger firings, from the buffer service."""
        stats: dict[str, Any] = (await self._send(buffers.stats_request(buffer_id))).json()
        return stats

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
