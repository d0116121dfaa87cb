"""An engine's HTTP surface: what Loom uses of an SGLang server, on plain ASGI.

One app serves either engine behind the :class:`Engine` interface: the emulated one
(``core``, filler text timed by the simulator's model) or the CPU one (``llamacpp``, llama.cpp
decoding a real model).

- ``POST /v1/chat/completions``, ``POST /v1/completions`` (OpenAI; SSE when ``stream``),
  ``POST /generate`` (SGLang native), each taking SGLang's ``rid`` and ``priority`` fields;
- ``POST /abort_request`` ``{"rid": ..., "abort_all": false}`` (unknown rid: a no-op);
- ``GET /v1/models``, ``GET /get_model_info``, ``GET /health``, ``GET /health_generate``;
- ``GET /metrics``: Prometheus text with SGLang's metric names (``sglang:num_running_reqs``,
  ``sglang:num_queue_reqs``, ``sglang:token_usage``, ``sglang:gen_throughput``,
  ``sglang:time_per_output_token_seconds``, ...).

A client that goes away (stream abandoned, connection closed while waiting) aborts its request,
so the decode batch never carries a request nobody reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Protocol

from workers.engine.asgi import (
    SSE_DONE,
    BodyTooLarge,
    Receive,
    Scope,
    Send,
    read_body,
    send_bytes,
    send_json,
    sse_event,
    start_sse,
)
from workers.engine.core import EngineBusy, EngineRequest, EngineStats, PromptTooLong
from workers.engine.openai_api import (
    BadRequest,
    GenerationSpec,
    error_body,
    full_response,
    new_request_id,
    parse_chat,
    parse_completion,
    parse_generate,
    stream_chunk,
    usage_chunk,
)

_PARSERS = {
    "/v1/chat/completions": parse_chat,
    "/v1/completions": parse_completion,
    "/generate": parse_generate,
}


class Engine(Protocol):
    """What the HTTP side needs of an engine (``core.EmulatedEngine``, ``llamacpp``'s)."""

    stats: EngineStats

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    def submit_spec(self, rid: str, spec: GenerationSpec) -> EngineRequest: ...

    def text(self, request: EngineRequest, start: int, end: int) -> str: ...

    def abort(self, rid: str) -> bool: ...

    def abort_all(self) -> int: ...

    @property
    def num_running(self) -> int: ...

    @property
    def num_queued(self) -> int: ...

    @property
    def kv_tokens(self) -> int | float: ...

    @property
    def token_usage(self) -> float: ...


class EngineApp:
    """ASGI app over one :class:`Engine` serving ``model_name``."""

    def __init__(self, engine: Engine, model_name: str = "loom-emulated") -> None:
        self.engine = engine
        self.model_name = model_name
        self.created = int(time.time())
        self._throughput_mark = (time.monotonic(), 0)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.engine.start()
        path, method = scope["path"], scope["method"]
        try:
            if method == "POST" and path in _PARSERS:
                await self._generate(path, receive, send)
            elif method == "POST" and path == "/abort_request":
                await self._abort(receive, send)
            elif method == "GET" and path in ("/health", "/health_generate"):
                await send_bytes(send, 200, b"", [(b"content-type", b"text/plain")])
            elif method == "GET" and path == "/v1/models":
                await send_json(send, 200, self.models())
            elif method == "GET" and path == "/get_model_info":
                await send_json(send, 200, {"model_path": self.model_name, "is_generation": True})
            elif method == "GET" and path == "/metrics":
                await send_bytes(
                    send, 200, self.metrics_text().encode(), [(b"content-type", b"text/plain")]
                )
            else:
                await send_json(
                    send,
                    404,
                    error_body(f"no route {method} {path}", param=None, code="not_found"),
                )
        except BadRequest as exc:
            await send_json(
                send, exc.status, error_body(exc.message, param=exc.param, code=exc.code)
            )

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.model_name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "loom",
                    "root": self.model_name,
                }
            ],
        }

    async def _json_body(self, receive: Receive) -> Any:
        try:
            raw = await read_body(receive)
        except BodyTooLarge as exc:
            raise BadRequest("body", str(exc), status=413) from None
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BadRequest("body", f"not valid JSON: {exc}") from None

    async def _abort(self, receive: Receive, send: Send) -> None:
        body = await self._json_body(receive)
        if not isinstance(body, dict):
            raise BadRequest("body", "must be a JSON object")
        if body.get("abort_all"):
            count = self.engine.abort_all()
        else:
            rid = body.get("rid")
            if not isinstance(rid, str):
                raise BadRequest("rid", "required: a string (or abort_all: true)")
            count = int(self.engine.abort(rid))
        await send_json(send, 200, {"success": True, "aborted": count})

    async def _generate(self, path: str, receive: Receive, send: Send) -> None:
        body = await self._json_body(receive)
        if body is None:
            return  # the client left before its request arrived
        spec: GenerationSpec = _PARSERS[path](body)
        if spec.model is not None and spec.model != self.model_name:
            raise BadRequest(
                "model",
                f"the model '{spec.model}' does not exist (serving '{self.model_name}')",
                status=404,
                code="model_not_found",
            )
        rid = spec.rid or new_request_id()
        try:
            request = self.engine.submit_spec(rid, spec)
        except EngineBusy as exc:
            raise BadRequest("rid", str(exc)) from None
        except PromptTooLong as exc:
            field = exc.field or {"chat": "messages", "completion": "prompt"}.get(spec.kind, "text")
            raise BadRequest(field, str(exc), code="context_length_exceeded") from None
        # The next receive() answers only when the client disconnects: abort then.
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(lambda _: self.engine.abort(rid))
        try:
            if spec.stream:
                await self._stream(spec, rid, request, send)
            else:
                generated = await request.progress(1 << 62)
                assert request.finish_reason is not None
                answer = full_response(
                    spec, rid, self.model_name, generated, request.finish_reason, self.created,
                    self._text_of(request), request.prompt_tokens,
                )  # fmt: skip
                await send_json(send, 200, answer)
        finally:
            watcher.cancel()

    def _text_of(self, request: EngineRequest) -> Any:
        return lambda start, end: self.engine.text(request, start, end)

    async def _stream(
        self, spec: GenerationSpec, rid: str, request: EngineRequest, send: Send
    ) -> None:
        await start_sse(send)
        model, created = self.model_name, self.created
        text_of, prompt_tokens = self._text_of(request), request.prompt_tokens
        seen = 0
        while True:
            generated = await request.progress(seen)
            finish = request.finish_reason
            if generated > seen or finish is not None:
                chunk = stream_chunk(
                    spec, rid, model, seen, generated, finish, created, text_of, prompt_tokens
                )
                await send(
                    {"type": "http.response.body", "body": sse_event(chunk), "more_body": True}
                )
            seen = generated
            if finish is not None:
                break
        tail = SSE_DONE
        if spec.include_usage:
            usage = usage_chunk(spec, rid, model, seen, created, prompt_tokens)
            tail = sse_event(usage) + SSE_DONE
        await send({"type": "http.response.body", "body": tail, "more_body": False})

    def metrics_text(self) -> str:
        """Prometheus exposition with SGLang's names (gauges and counters)."""
        engine, stats = self.engine, self.engine.stats
        now = time.monotonic()
        mark_at, mark_tokens = self._throughput_mark
        elapsed = now - mark_at
        throughput = (stats.generation_tokens - mark_tokens) / elapsed if elapsed > 0 else 0.0
        if elapsed > 1.0:
            self._throughput_mark = (now, stats.generation_tokens)
        label = '{model_name="' + self.model_name + '"}'
        tpot = (
            stats.decode_token_seconds_sum / stats.generation_tokens
            if stats.generation_tokens
            else 0.0
        )
        admitted_tokens = stats.cached_prompt_tokens + stats.prefill_tokens
        cache_hit_rate = stats.cached_prompt_tokens / admitted_tokens if admitted_tokens else 0.0
        rows = [
            ("sglang:num_running_reqs", "gauge", engine.num_running),
            ("sglang:num_queue_reqs", "gauge", engine.num_queued),
            ("sglang:num_used_tokens", "gauge", engine.kv_tokens),
            ("sglang:token_usage", "gauge", engine.token_usage),
            ("sglang:cache_hit_rate", "gauge", cache_hit_rate),
            ("sglang:gen_throughput", "gauge", throughput),
            ("sglang:time_per_output_token_seconds", "gauge", tpot),
            ("sglang:prompt_tokens_total", "counter", stats.prompt_tokens),
            ("sglang:generation_tokens_total", "counter", stats.generation_tokens),
            ("sglang:num_requests_total", "counter", stats.requests_finished),
            ("sglang:num_aborted_requests_total", "counter", stats.requests_aborted),
            ("sglang:num_preemptions_total", "counter", stats.preemptions),
        ]
        lines = []
        for name, kind, value in rows:
            lines.append(f"# TYPE {name} {kind}")
            lines.append(f"{name}{label} {float(value)!r}")
        return "\n".join(lines) + "\n"
