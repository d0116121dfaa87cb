"""The router's lean HTTP/1.1 server on raw sockets (what an HTTP client may send it), and the
stream relay that writes a worker's SSE to the client from the socket callbacks."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from workers.engine.asgi import Receive, Scope, Send, bind, send_json
from workers.router import server as lean
from workers.router.forward import Forwarder, worker_lost_event
from workers.router.pool import InFlight, LLMWorker
from workers.router.relay import StreamRelay
from workers.router.server import LeanServer
from workers.router.upstream import Upstream

seen: dict[str, Any] = {}


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    path = scope["path"]
    if path == "/boom":
        raise RuntimeError("a bug")
    message = await receive()
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    elif path == "/wait":  # answers only once the client has gone
        seen["disconnect"] = (await receive())["type"]
    else:
        await send_json(send, 200, {"path": path, "query": scope["query_string"].decode(),
                                    "body": message["body"].decode()})  # fmt: skip


@pytest.fixture
async def served() -> AsyncIterator[LeanServer]:
    server = LeanServer(app, bind())
    await server.start()
    yield server
    await server.stop()


async def exchange(server: LeanServer, raw: bytes, until: bytes, timeout_s: float = 5.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(raw)
    data = b""
    try:
        while until not in data:
            chunk = await asyncio.wait_for(reader.read(65536), timeout_s)
            if not chunk:
                break
            data += chunk
    finally:
        writer.close()
    return data


async def test_keep_alive_and_pipelined_requests_answered_in_order(served: LeanServer) -> None:
    one = b"POST /a?x=1 HTTP/1.1\r\nhost: h\r\ncontent-length: 3\r\n\r\nabc"
    two = b"GET /b%20c HTTP/1.1\r\nhost: h\r\n\r\n"
    data = await exchange(served, one + two, b'"/b c"')
    first, second = data.split(b"HTTP/1.1 200 OK")[1:]
    assert b'"path":"/a"' in first and b'"query":"x=1"' in first and b'"body":"abc"' in first
    assert b"content-length:" in first and b"connection: close" not in first
    assert b'"path":"/b c"' in second
    async with httpx.AsyncClient(base_url=served.url) as http:  # a real client, one connection
        answers = [await http.post(f"/n{i}", content=b"x" * i) for i in range(3)]
    assert [a.json()["body"] for a in answers] == ["", "x", "xx"]


async def test_a_streamed_answer_is_chunked(served: LeanServer) -> None:
    raw = await exchange(served, b"GET /stream HTTP/1.1\r\nhost: h\r\n\r\n", b"0\r\n\r\n")
    assert b"transfer-encoding: chunked" in raw
    async with httpx.AsyncClient(base_url=served.url) as http:
        assert (await http.get("/stream")).text == "one two three"


async def test_http_1_0_is_closed_after_its_answer(served: LeanServer) -> None:
    data = await exchange(served, b"GET /old HTTP/1.0\r\n\r\n", b"never")
    assert b"connection: close" in data and data.endswith(b"}")  # and the server closed it


async def test_expect_100_continue(served: LeanServer) -> None:
    head = b"POST /e HTTP/1.1\r\nhost: h\r\nexpect: 100-continue\r\ncontent-length: 2\r\n\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(head)
    interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"ok")
    answer = await asyncio.wait_for(reader.readuntil(b"}"), 5)
    writer.close()
    assert b'"body":"ok"' in answer


async def test_malformed_and_oversized_requests(
    served: LeanServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    garbage = await exchange(served, b"NOT HTTP AT ALL\r\n\r\n", b"never")
    assert garbage.startswith(b"HTTP/1.1 400 Bad Request") and b"malformed" in garbage
    monkeypatch.setattr(lean, "MAX_BODY_BYTES", 10)
    big = b"POST /big HTTP/1.1\r\nhost: h\r\ncontent-length: 11\r\n\r\n" + b"x" * 11
    too_large = await exchange(served, big, b"never")
    assert too_large.startswith(b"HTTP/1.1 413 Payload Too Large")


async def test_an_app_failure_is_a_500_and_the_connection_closes(served: LeanServer) -> None:
    data = await exchange(served, b"GET /boom HTTP/1.1\r\nhost: h\r\n\r\n", b"never")
    assert data.startswith(b"HTTP/1.1 500 Internal Server Error")


async def test_the_app_learns_that_the_client_left(served: LeanServer) -> None:
    seen.clear()
    _, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(b"GET /wait HTTP/1.1\r\nhost: h\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.1)
    assert "disconnect" not in seen  # receive() waits while the client stays
    writer.close()
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.02)
    assert seen == {"disconnect": "http.disconnect"}


# ---------------------------------------------------------------------- stream relay
class FakeRaw:
    def __init__(self) -> None:
        self.writes: list[tuple[bytes, bool]] = []
        self.throttled: Any = None

    def stream_start(self, headers: list[tuple[bytes, bytes]]) -> None:
        self.writes.append((b"<start>", False))

    def stream_write(self, data: bytes, *, last: bool = False) -> None:
        self.writes.append((data, last))

    def stream_throttle(self, upstream: asyncio.Transport | None) -> None:
        self.throttled = upstream


class Step:
    first_at: float | None = None
    tokens = 0


def relay_for(raw: FakeRaw, step: Step, strip: bool) -> StreamRelay:
    worker = LLMWorker(name="w0", url="http://127.0.0.1:1", upstream=Upstream("http://x:1"))
    flight = InFlight("r1", "t1", "7", worker)
    return StreamRelay(raw, step, strip, flight, Forwarder._take_usage, worker_lost_event)


async def test_the_relay_keeps_partial_events_and_reads_then_strips_the_usage() -> None:
    raw, step = FakeRaw(), Step()
    relay = relay_for(raw, step, strip=True)
    relay.feed(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"cho')
    relay.flush()
    assert raw.writes == [(b'data: {"choices":[{"text":"a"}]}\n\n', False)]
    assert step.first_at is not None
    relay.feed(b'ices":[{"text":"b"}]}\n\n')
    usage = {"choices": [], "usage": {"completion_tokens": 2}}
    relay.feed(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n")
    relay.end()
    assert raw.writes[1] == (b'data: {"choices":[{"text":"b"}]}\n\ndata: [DONE]\n\n', True)
    assert step.tokens == 2 and relay.done.done()
    relay.flush()  # nothing after the end
    assert len(raw.writes) == 2


async def test_a_lost_worker_ends_the_stream_with_a_retryable_error() -> None:
    raw, step = FakeRaw(), Step()
    relay = relay_for(raw, step, strip=False)
    relay.feed(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"half')
    relay.lost(ConnectionError("worker connection lost"))
    (first, more), (error, last) = raw.writes
    assert first == b'data: {"choices":[{"text":"a"}]}\n\n' and not more
    assert last and json.loads(error[6:])["error"]["code"] == "worker_lost"
    assert json.loads(error[6:])["error"]["retryable"] is True


def test_a_router_process_finishes_its_streams_on_sigterm(starts_processes: None) -> None:
    import signal
    import subprocess

    from bench.router_overhead import _start

    engine, engine_url = _start(["workers.engine", "--port", "0", "--model-name", "tiny"])
    router, router_url = _start(
        ["workers.router", "--open", "--port", "0", "--worker", engine_url,
         "--http-server", "lean"]
    )  # fmt: skip
    try:
        body = {"model": "tiny", "prompt": "a", "max_tokens": 30, "stream": True,
                "loom_trajectory": "t1"}  # fmt: skip
        with (
            httpx.Client(base_url=router_url, timeout=30) as http,
            http.stream("POST", "/v1/completions", json=body) as response,
        ):
            chunks = response.iter_bytes()
            next(chunks)  # the engine is decoding it
            router.send_signal(signal.SIGTERM)
            text = b"".join(chunks)
        assert text.endswith(b"data: [DONE]\n\n")  # finished whole
        assert router.wait(20) == 0
    finally:
        for process in (router, engine):
            if process.poll() is None:
                process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
