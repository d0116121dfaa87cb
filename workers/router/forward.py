"""One step's request through the router: choose, forward, relay, account.

The policy picks the worker and the priority; the request goes out with SGLang's ``rid`` and
``priority`` fields (and, when streaming, ``stream_options.include_usage`` so the router learns
the step's token count from the worker's own usage event — dropped again if the client did not
ask for it). Bytes are relayed as they arrive; only an event carrying ``"usage"`` is parsed.
The step's end updates the trajectory (tokens, timings, prediction) and publishes its state.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

from workers.engine.asgi import JSON_HEADERS, SSE_HEADERS, Receive, Send, dumps, sse_event
from workers.engine.openai_api import GenerationSpec
from workers.router.policies import RoutingPolicy
from workers.router.pool import InFlight, LLMWorker, WorkerPool
from workers.router.relay import USAGE as _USAGE
from workers.router.relay import RawStream, StreamRelay, complete_events
from workers.router.trajectories import TERMINAL, TrajectoryState, TrajectoryTable
from workers.router.upstream import UpstreamLost, UpstreamResponse

_HEADERS = ((b"content-type", b"application/json"),)


class RouterError(Exception):
    """An error answered in the router's error shape (``app.error_body``)."""

    def __init__(
        self, status: int, field: str, reason: str, code: str, *, retryable: bool = False
    ) -> None:
        super().__init__(f"{field}: {reason}")
        self.status = status
        self.field = field
        self.reason = reason
        self.code = code
        self.retryable = retryable


def worker_lost_event(reason: str) -> bytes:
    return sse_event(
        {
            "error": {
                "message": f"{reason}; the request did not finish — retry it",
                "type": "server_error",
                "param": None,
                "code": "worker_lost",
                "retryable": True,
            }
        }
    )


class _Step:
    """What one step's relay learns: first-byte time, completion tokens."""

    __slots__ = ("first_at", "tokens")

    def __init__(self) -> None:
        self.first_at: float | None = None
        self.tokens = 0


class Forwarder:
    def __init__(
        self,
        pool: WorkerPool,
        policy: RoutingPolicy,
        table: TrajectoryTable,
        *,
        publish: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.pool = pool
        self.policy = policy
        self.table = table
        self.publish = publish or (lambda state: None)
        self._ids = itertools.count()

    def _choose(self, state: TrajectoryState, exclude: LLMWorker | None) -> LLMWorker:
        workers = [w for w in self.pool.available() if w is not exclude]
        if not workers:
            raise RouterError(
                503, "worker", "no healthy LLM worker is available", "no_worker", retryable=True
            )
        return self.policy.choose(state, workers)

    async def forward(
        self,
        state: TrajectoryState,
        path: str,
        body: dict[str, Any],
        spec: GenerationSpec,
        receive: Receive,
        send: Send,
        raw: RawStream | None = None,
    ) -> None:
        """``raw``: the router's own server's stream writer, relayed to from the worker
        connection's callbacks (:mod:`.relay`); None under any other ASGI server."""
        if state.status in TERMINAL:
            raise RouterError(
                409, "X-Loom-Trajectory", f"trajectory already {state.status}", "trajectory_ended"
            )
        arrived = time.monotonic()
        self.table.step_started(state, arrived)
        rid = spec.rid or f"{state.trajectory_id}.{state.steps}.{next(self._ids)}"
        if rid in self.pool.requests:
            raise RouterError(400, "rid", f"request id {rid!r} is already in flight", "duplicate")
        strip_usage = spec.stream and not spec.include_usage
        if strip_usage:
            body["stream_options"] = {"include_usage": True}
        body["rid"] = rid
        worker: LLMWorker | None = None
        response: UpstreamResponse | None = None
        flight: InFlight | None = None
        for attempt in (0, 1):  # a worker lost before answering: once more elsewhere
            worker = self._choose(state, exclude=worker)
            state.priority = self.policy.priority(state)
            body["priority"] = state.priority
            payload = dumps(body)
            # Written before the bookkeeping below (no await in between): the worker starts on
            # the request while the router accounts for it.
            sent = worker.upstream.send("POST", path, payload, _HEADERS)
            flight = self.pool.begin(rid, state.trajectory_id, state.job_id, worker)
            state.in_flight.add(rid)
            self._moved_to(state, worker)
            self.publish(state.snapshot("step_started"))
            try:
                if sent is None:
                    sent = await worker.upstream.request("POST", path, payload, _HEADERS)
                else:
                    sent = await worker.upstream.started(sent)
                response = sent
                break
            except (UpstreamLost, OSError, TimeoutError) as exc:
                self._close(state, flight)
                self.pool.mark_dead(worker, f"request failed: {exc}")
                if attempt == 1:
                    raise RouterError(
                        503, "worker", f"worker {worker.name} failed: {exc}", "worker_lost",
                        retryable=True,
                    ) from None  # fmt: skip
        assert response is not None and flight is not None and worker is not None
        flight.response = response
        # The next receive() answers only when the client disconnects: abort the request then.
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(
            lambda done: (
                None if done.cancelled() else self.pool.abort(flight, "client went away", cut=True)
            )
        )
        step = _Step()
        if not spec.stream:
            step.first_at = arrived  # one answer at the end: no queueing/generation split
        try:
            if response.status != 200 or not spec.stream:
                await self._relay_whole(response, send, step)
            elif raw is not None:
                await self._relay_raw(response, raw, step, strip_usage, flight)
            else:
                await self._relay_stream(response, send, step, strip_usage, flight)
        finally:
            watcher.cancel()
            self._close(state, flight)
            flight.response = None  # response → relay → flight → response: freed without the GC
            now = time.monotonic()
            first = step.first_at or now
            self.table.step_finished(
                state, tokens=step.tokens, queueing_s=first - arrived, generation_s=now - first,
                now=now, then=lambda: self.publish(state.snapshot("step_finished")),
            )  # fmt: skip

    def _moved_to(self, state: TrajectoryState, worker: LLMWorker) -> None:
        if state.worker != worker.name:
            if state.worker is not None:
                old = self.pool.by_name.get(state.worker)
                if old is not None:
                    old.trajectories.discard(state.trajectory_id)
            state.worker = worker.name
            worker.trajectories.add(state.trajectory_id)

    def _close(self, state: TrajectoryState, flight: InFlight) -> None:
        self.pool.finish(flight)
        state.in_flight.discard(flight.rid)

    async def _relay_whole(self, response: UpstreamResponse, send: Send, step: _Step) -> None:
        try:
            payload = await response.read()
        except UpstreamLost as exc:
            raise RouterError(
                503, "worker", f"{exc}; the request did not finish — retry it", "worker_lost",
                retryable=True,
            ) from None  # fmt: skip
        if response.status == 200:
            try:
                step.tokens = int(json.loads(payload)["usage"]["completion_tokens"])
            except (ValueError, KeyError, TypeError):
                step.tokens = 0
        content_type = response.header(b"content-type") or b"application/json"
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(b"content-type", content_type)] if content_type else JSON_HEADERS,
            }
        )
        await send({"type": "http.response.body", "body": payload})

    async def _relay_stream(
        self,
        response: UpstreamResponse,
        send: Send,
        step: _Step,
        strip_usage: bool,
        flight: InFlight,
    ) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE_HEADERS})
        pending = b""
        try:
            async for chunk in response.chunks():
                if step.first_at is None:
                    step.first_at = time.monotonic()
                if pending:
                    chunk, pending = pending + chunk, b""
                # The worker's last bytes go out with the end of the response in one write.
                last = response.ended
                if not last and not chunk.endswith(b"\n\n"):  # keep a partial event for later
                    chunk, pending = complete_events(chunk)
                    if not chunk:
                        continue
                if _USAGE in chunk:
                    chunk = self._take_usage(chunk, step, strip_usage)
                if last:
                    await send({"type": "http.response.body", "body": chunk, "more_body": False})
                    return
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except UpstreamLost as exc:
            reason = flight.lost_reason or str(exc)
            await send(
                {
                    "type": "http.response.body",
                    "body": worker_lost_event(reason),
                    "more_body": False,
                }
            )
            return
        await send({"type": "http.response.body", "body": pending, "more_body": False})

    async def _relay_raw(
        self,
        response: UpstreamResponse,
        raw: RawStream,
        step: _Step,
        strip_usage: bool,
        flight: InFlight,
    ) -> None:
        raw.stream_start(SSE_HEADERS)
        relay = StreamRelay(raw, step, strip_usage, flight, self._take_usage, worker_lost_event)
        raw.stream_throttle(response.transport)
        try:
            response.attach(relay)
            await relay.done
        finally:
            raw.stream_throttle(None)

    @staticmethod
    def _take_usage(chunk: bytes, step: _Step, strip: bool) -> bytes:
        """Read the completion tokens off the usage event; drop it if the client did not ask."""
        kept = []
        for event in chunk.split(b"\n\n"):
            if _USAGE in event and event.startswith(b"data: {"):
                try:
                    data = json.loads(event[6:])
                    usage = data.get("usage") or {}
                    step.tokens = int(usage.get("completion_tokens", step.tokens))
                    if strip and not data.get("choices"):
                        continue
                except (ValueError, TypeError):
                    pass
            kept.append(event)
        return b"\n\n".join(kept)

    def expire_idle(self, idle_s: float) -> int:
        """Forget trajectories idle for ``idle_s`` (their last state published as ``expired``,
        status unchanged: the router does not know how they ended)."""
        expired = self.table.idle(time.monotonic(), idle_s)
        for state in expired:
            self.table.active.pop(state.trajectory_id, None)
            self.policy.forget(state)
            worker = self.pool.by_name.get(state.worker or "")
            if worker is not None:
                worker.trajectories.discard(state.trajectory_id)
            self.publish(state.snapshot("expired"))
        return len(expired)

    def end_trajectory(self, trajectory_id: str, status: str) -> int:
        """Abort every request of the trajectory on its worker, end it, publish its last state."""
        state = self.table.get(trajectory_id)
        if state is None:
            return 0
        aborted = 0
        for rid in list(state.in_flight):
            flight = self.pool.requests.get(rid)
            if flight is not None:
                self.pool.abort(flight, f"trajectory {status}", cut=False)
                aborted += 1
        self.table.end(state, status)
        self.policy.forget(state)
        if state.worker is not None:
            worker = self.pool.by_name.get(state.worker)
            if worker is not None:
                worker.trajectories.discard(trajectory_id)
        self.publish(state.snapshot("ended"))
        return aborted
