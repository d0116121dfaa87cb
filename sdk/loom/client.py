"""``loom.Client``: the synchronous SDK a trainer imports."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import httpx

from loom import buffers, groups, protocol, trajectories
from loom.aio import AsyncClient
from loom.coalesce import LoopThread
from loom.errors import LoomError, ResultTimeout, TransientError
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
        llm_url: str | None = None,
    ) -> None:
        self._retry = retry or protocol.RetryPolicy()
        self._api_key = api_key
        # Loom's LLM router (its base URL, without /v1): generate() and stream() go there.
        self._llm = (
            None
            if llm_url is None
            else httpx.Client(base_url=llm_url, timeout=httpx.Timeout(timeout_s * 10))
        )
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
        if self._llm is not None:
            self._llm.close()

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

    def _send(self, request: protocol.Request, *, retry: bool = True) -> httpx.Response:
        """``retry=False``: one attempt (a push must not be applied twice)."""
        last_error: str = ""
        for attempt in range(self._retry.attempts if retry else 1):
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

    # --- trajectories and their LLM turns (heddle §4), see loom.trajectories ---------------

    def create_trajectory(self, **fields: Any) -> trajectories.Trajectory:
        """Register a trajectory (``training_step``, ``prompt_id``, ``group_id``,
        ``sample_index``); sent once: a retried create could register two."""
        request = trajectories.create_request(fields)
        return trajectories.parse_trajectory(self._send(request, retry=False))

    def get_trajectory(self, trajectory_id: int) -> trajectories.Trajectory:
        return trajectories.parse_trajectory(self._send(trajectories.get_request(trajectory_id)))

    def end_trajectory(
        self, trajectory_id: int, *, status: str = "finished", reward: float | None = None
    ) -> trajectories.Trajectory:
        """End it (finished, aborted or failed) with its reward; the router then refuses it.
        With ``llm_url``, on the router first (see ``trajectories.router_end``); a router that
        cannot be reached does not keep the trajectory from ending."""
        if self._llm is not None:
            path, body = trajectories.router_end(trajectory_id, status)
            headers = trajectories.llm_headers(self._api_key, trajectory_id)
            with contextlib.suppress(httpx.TransportError):
                response = self._llm.post(path, json=body, headers=headers)
                trajectories.router_end_answered(response)
        request = trajectories.end_request(trajectory_id, status, reward)
        return trajectories.parse_trajectory(self._send(request))

    def generate(
        self,
        trajectory_id: int,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        **options: Any,
    ) -> trajectories.Turn:
        """One LLM turn of the trajectory through the router (``options``: max_tokens,
        temperature, seed, ignore_eos, ...)."""
        response = self._llm_client().post(
            trajectories.CHAT,
            json=trajectories.chat_body(model, messages, options, stream=False),
            headers=trajectories.llm_headers(self._api_key, trajectory_id),
        )
        return trajectories.parse_turn(response)

    def stream(
        self,
        trajectory_id: int,
        messages: Sequence[Mapping[str, Any]],
        *,
        model: str,
        **options: Any,
    ) -> Iterator[str]:
        """One LLM turn, its text yielded as the engine decodes it."""
        with self._llm_client().stream(
            "POST",
            trajectories.CHAT,
            json=trajectories.chat_body(model, messages, options, stream=True),
            headers=trajectories.llm_headers(self._api_key, trajectory_id),
        ) as response:
            if response.status_code >= 400:
                response.read()
                trajectories.raise_for_llm_status(response)
            for line in response.iter_lines():
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
    ) -> groups.GroupRollout:
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
        return groups.GroupRollout(self._llm_client(), body, self._api_key, on_tokens)

    def _llm_client(self) -> httpx.Client:
        if self._llm is None:
            raise LoomError("no LLM router: create the client with llm_url=...")
        return self._llm

    # --- buffers (artos §4): definitions and experience, see loom.buffers -------------------

    def declare_buffer(self, **fields: Any) -> buffers.Buffer:
        """Declare a buffer; keyword arguments as :func:`loom.buffers.declare_request`."""
        request = buffers.declare_request(**fields)
        return buffers.parse_buffer(self._send(request))

    def declare_workflow(self, definition: Any, *, job: int | None = None) -> list[buffers.Buffer]:
        """Declare a workflow's buffers and triggers, all or none: a ``Workflow`` or its
        ``to_json()``."""
        request = buffers.declare_workflow_request(definition, job)
        return buffers.parse_buffers(self._send(request))

    def list_buffers(self) -> list[buffers.Buffer]:
        """Every buffer this key sees (its job's; staff: all), newest first."""
        found: list[buffers.Buffer] = []
        request: protocol.Request | None = buffers.list_request()
        while request is not None:
            page, request = buffers.next_page(self._send(request))
            found += page
        return found

    def get_buffer(self, buffer_id: int) -> buffers.Buffer:
        return buffers.parse_buffer(self._send(buffers.get_request(buffer_id)))

    def delete_buffer(self, buffer_id: int) -> None:
        self._send(buffers.delete_request(buffer_id))

    def push(self, buffer_id: int, actor: str, records: Mapping[str, Any]) -> dict[str, int]:
        """Append steps for ``actor`` (data key → one entry per step); returns ``steps`` and the
        trigger ``firings`` it caused. Sent once, never retried: a retried push whose first
        attempt did land would store its steps twice."""
        request = buffers.push_request(buffer_id, actor, records)
        body: dict[str, int] = (self._send(request, retry=False)).json()
        return body

    def gather(
        self, buffer_id: int, slices: Mapping[str, tuple[int, int]], keys: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Steps ``[start, stop)`` of each actor (what a DataKeyTrigger's firing names)."""
        request = buffers.gather_request(buffer_id, slices, keys)
        records: dict[str, Any] = (self._send(request)).json()["records"]
        return records

    def sample(
        self,
        buffer_id: int,
        batch_size: int | None = None,
        keys: Iterable[str] = (),
        **options: Any,
    ) -> buffers.Sample:
        """A batch drawn with the buffer's sampler (full batch: every complete step, once);
        ``options``: the n-step or FIFO-per-actor sampler's (``buffers.sample_request``)."""
        request = buffers.sample_request(buffer_id, batch_size, keys, **options)
        return buffers.parse_sample(self._send(request, retry=False))

    def update_priorities(self, buffer_id: int, slots: Sequence[int], td_errors: Any) -> int:
        """PER: new priorities |δ| + ε for the slots a prioritised sample returned."""
        request = buffers.priorities_request(buffer_id, slots, td_errors)
        return int((self._send(request)).json()["updated"])

    def buffer_stats(self, buffer_id: int) -> dict[str, Any]:
        """Fill level, counters and trigger firings, from the buffer service."""
        stats: dict[str, Any] = (self._send(buffers.stats_request(buffer_id))).json()
        return stats
