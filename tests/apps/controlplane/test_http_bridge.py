"""The ASGI→WSGI HTTP bridge: request body, environ, plain and streaming responses, Django."""

from __future__ import annotations

import asyncio
import io
import json
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from controlplane.http_bridge import (
    Message,
    Scope,
    WsgiApp,
    WsgiBridge,
    wsgi_environ,
)

StartResponse = Callable[..., Any]


def http_scope(**overrides: Any) -> Scope:
    scope: Scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/",
        "raw_path": b"/",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("10.1.2.3", 54321),
        "server": ("testserver", 8000),
    }
    scope.update(overrides)
    return scope


def body_messages(*chunks: bytes) -> list[Message]:
    """``http.request`` messages carrying ``chunks``, all but the last with more_body=True."""
    return [
        {"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]


async def call(app: Any, scope: Scope, incoming: list[Message] | None = None) -> list[Message]:
    """Run one ASGI request through ``app``; the messages it sent, in order."""
    pending = list(incoming if incoming is not None else body_messages(b""))
    sent: list[Message] = []

    async def receive() -> Message:
        # Once the scripted messages are used up, the client hangs up (as a server would say).
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def bridge(app: WsgiApp, *, spool_bytes: int = 1024 * 1024) -> WsgiBridge:
    return WsgiBridge(app, threads=2, spool_bytes=spool_bytes)


class Recorder:
    """A WSGI app that keeps the environ and the body it was called with, and answers 200 ok."""

    def __init__(self) -> None:
        self.calls = 0
        self.environ: dict[str, Any] = {}
        self.body = b""
        self.input: IO[bytes] | None = None

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        self.calls += 1
        self.environ = dict(environ)
        self.input = environ["wsgi.input"]
        self.body = environ["wsgi.input"].read()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]


def environ_for(scope: Scope, body: bytes = b"") -> dict[str, Any]:
    return wsgi_environ(scope, io.BytesIO(body))


# --- request body ----------------------------------------------------------------------------


async def test_chunked_body_arrives_whole_with_its_length():
    app = Recorder()
    chunks = [b"alpha-", b"", b"beta-", b"gamma"]
    scope = http_scope(
        method="POST",
        headers=[(b"host", b"testserver"), (b"transfer-encoding", b"chunked")],
    )
    sent = await call(bridge(app), scope, body_messages(*chunks))
    assert app.calls == 1
    assert app.body == b"alpha-beta-gamma"
    assert app.environ["CONTENT_LENGTH"] == str(len(b"alpha-beta-gamma"))
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


async def test_content_length_is_the_body_length_not_the_header():
    app = Recorder()
    scope = http_scope(method="POST", headers=[(b"content-length", b"999")])
    await call(bridge(app), scope, body_messages(b"1234"))
    assert app.body == b"1234" and app.environ["CONTENT_LENGTH"] == "4"
    assert "HTTP_CONTENT_LENGTH" not in app.environ


async def test_body_beyond_spool_bytes_is_spooled_to_disk_and_arrives_whole():
    app = Recorder()
    chunk = bytes(range(256)) * 64  # 16 KiB, every byte value
    chunks = [chunk] * 8
    await call(bridge(app, spool_bytes=1024), http_scope(method="PUT"), body_messages(*chunks))
    assert app.body == b"".join(chunks)
    assert app.environ["CONTENT_LENGTH"] == str(len(chunk) * 8)
    assert isinstance(app.input, tempfile.SpooledTemporaryFile)
    assert not isinstance(app.input._file, io.BytesIO)  # rolled over to a real file
    assert app.input.closed  # the bridge closes (and so deletes) it after the response


async def test_small_body_stays_in_memory():
    app = Recorder()
    await call(bridge(app, spool_bytes=1024), http_scope(method="POST"), body_messages(b"x" * 10))
    assert app.body == b"x" * 10
    assert isinstance(app.input, tempfile.SpooledTemporaryFile)
    assert isinstance(app.input._file, io.BytesIO)


async def test_empty_body_gives_content_length_zero():
    app = Recorder()
    await call(bridge(app), http_scope(), [{"type": "http.request"}])
    assert app.body == b"" and app.environ["CONTENT_LENGTH"] == "0"


async def test_disconnect_before_the_body_is_complete_calls_nothing_and_sends_nothing():
    app = Recorder()
    incoming: list[Message] = [
        {"type": "http.request", "body": b"part", "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent = await call(bridge(app), http_scope(method="POST"), incoming)
    assert app.calls == 0
    assert sent == []


async def test_non_http_scope_is_refused():
    app = Recorder()
    with pytest.raises(ValueError, match="websocket"):
        await call(bridge(app), {"type": "websocket", "path": "/ws/"})
    with pytest.raises(ValueError, match="lifespan"):
        await call(bridge(app), {"type": "lifespan"})
    assert app.calls == 0


# --- environ -------------------------------------------------------------------------------


async def test_environ_seen_by_the_wsgi_app():
    app = Recorder()
    scope = http_scope(
        method="PATCH",
        path="/loom/api/v1/jobs/7/",
        root_path="/loom",
        query_string=b"wait=5&x=%20y",
        headers=[
            (b"host", b"example.org"),
            (b"content-type", b"application/json"),
            (b"x-request-id", b"abc"),
            (b"accept", b"text/html"),
            (b"accept", b"application/json"),
        ],
        client=("192.0.2.9", 4242),
    )
    await call(bridge(app), scope, body_messages(b"{}"))
    env = app.environ
    assert env["REQUEST_METHOD"] == "PATCH"
    assert env["SCRIPT_NAME"] == "/loom"
    assert env["PATH_INFO"] == "/api/v1/jobs/7/"
    assert env["QUERY_STRING"] == "wait=5&x=%20y"
    assert env["REMOTE_ADDR"] == "192.0.2.9" and env["REMOTE_PORT"] == "4242"
    assert env["CONTENT_TYPE"] == "application/json"
    assert "HTTP_CONTENT_TYPE" not in env
    assert env["HTTP_HOST"] == "example.org"
    assert env["HTTP_X_REQUEST_ID"] == "abc"
    assert env["HTTP_ACCEPT"] == "text/html,application/json"
    assert env["CONTENT_LENGTH"] == "2"
    assert env["SERVER_NAME"] == "testserver" and env["SERVER_PORT"] == "8000"
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["wsgi.url_scheme"] == "http"
    assert env["wsgi.version"] == (1, 0)
    assert env["wsgi.multithread"] is True and env["wsgi.run_once"] is False


def test_wsgi_environ_path_outside_root_path_is_kept_whole():
    env = environ_for(http_scope(path="/elsewhere/x", root_path="/loom"))
    assert env["SCRIPT_NAME"] == "/loom"
    assert env["PATH_INFO"] == "/elsewhere/x"


def test_wsgi_environ_no_root_path():
    env = environ_for({k: v for k, v in http_scope(path="/a/b").items() if k != "root_path"})
    assert env["SCRIPT_NAME"] == "" and env["PATH_INFO"] == "/a/b"


def test_wsgi_environ_non_ascii_path_is_utf8_bytes_as_latin1():
    env = environ_for(http_scope(path="/café/ü"))
    assert env["PATH_INFO"] == "/café/ü".encode().decode("latin1")
    assert env["PATH_INFO"].encode("latin1").decode("utf-8") == "/café/ü"


def test_wsgi_environ_defaults_and_scheme():
    scope = http_scope(scheme="https", http_version="2")
    for key in ("server", "client"):
        del scope[key]
    env = environ_for(scope, b"abc")
    assert env["SERVER_NAME"] == "localhost" and env["SERVER_PORT"] == "80"
    assert "REMOTE_ADDR" not in env
    assert env["wsgi.url_scheme"] == "https"
    assert env["SERVER_PROTOCOL"] == "HTTP/2"
    assert env["CONTENT_LENGTH"] == "3"
    assert env["wsgi.input"].read() == b"abc"  # rewound after measuring


def test_wsgi_environ_unix_socket_server_has_port_80():
    env = environ_for(http_scope(server=("/run/loom.sock", None)))
    assert env["SERVER_NAME"] == "/run/loom.sock" and env["SERVER_PORT"] == "80"


def test_wsgi_environ_repeated_content_type_and_headers_are_joined():
    env = environ_for(
        http_scope(
            headers=[
                (b"X-Forwarded-For", b"1.1.1.1"),
                (b"x-forwarded-for", b"2.2.2.2"),
                (b"x-forwarded-for", b"3.3.3.3"),
            ]
        )
    )
    assert env["HTTP_X_FORWARDED_FOR"] == "1.1.1.1,2.2.2.2,3.3.3.3"


# --- responses -----------------------------------------------------------------------------


class Closing:
    """A WSGI response iterable that records close()."""

    def __init__(self, chunks: list[bytes], *, streaming: bool) -> None:
        self.chunks = chunks
        self.streaming = streaming
        self.closed = 0
        self.iterated_in: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        self.iterated_in = threading.current_thread().name
        yield from self.chunks

    def close(self) -> None:
        self.closed += 1


async def test_plain_response_is_one_start_and_one_body():
    response = Closing([b"hel", b"", b"lo"], streaming=False)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        start_response(
            "201 Created",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Set-Cookie", "a=1; Path=/"),
                ("Set-Cookie", "b=2; HttpOnly"),
                ("X-Thing", "v"),
            ],
        )
        return response

    sent = await call(bridge(app), http_scope())
    assert sent == [
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"set-cookie", b"a=1; Path=/"),
                (b"set-cookie", b"b=2; HttpOnly"),
                (b"x-thing", b"v"),
            ],
        },
        {"type": "http.response.body", "body": b"hello"},
    ]
    assert response.closed == 1
    assert response.iterated_in is not None and response.iterated_in.startswith("loom-http")


async def test_streaming_response_is_sent_chunk_by_chunk_and_closed():
    sent: list[Message] = []
    seen_before_each_chunk: list[int] = []

    class Stream(Closing):
        def __iter__(self) -> Iterator[bytes]:
            for chunk in self.chunks:
                seen_before_each_chunk.append(len(sent))
                yield chunk

    response = Stream([b"one", b"", b"two", b"three"], streaming=True)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return response

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await bridge(app)(http_scope(), receive, send)
    assert sent == [
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream")],
        },
        {"type": "http.response.body", "body": b"one", "more_body": True},
        {"type": "http.response.body", "body": b"two", "more_body": True},
        {"type": "http.response.body", "body": b"three", "more_body": True},
        {"type": "http.response.body", "body": b""},
    ]
    # Each chunk is sent before the next is produced: the response is never held whole.
    assert seen_before_each_chunk == [1, 2, 2, 3]
    assert response.closed == 1


async def test_streaming_response_is_closed_when_iteration_fails():
    class Broken(Closing):
        def __iter__(self) -> Iterator[bytes]:
            yield b"first"
            raise RuntimeError("boom")

    response = Broken([], streaming=True)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        start_response("200 OK", [])
        return response

    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request"}

    async def send(message: Message) -> None:
        sent.append(message)

    with pytest.raises(RuntimeError, match="boom"):
        await bridge(app)(http_scope(), receive, send)
    assert response.closed == 1
    assert [m.get("body") for m in sent] == [None, b"first"]


async def test_requests_run_concurrently_in_the_pool():
    # Two requests, each waiting for the other inside the WSGI app: both must be in flight at
    # once (a pool of two threads), or the barrier times out.
    barrier = threading.Barrier(2, timeout=5)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        barrier.wait()
        start_response("200 OK", [])
        return [environ["PATH_INFO"].encode()]

    shared = bridge(app)
    first, second = await asyncio.gather(
        call(shared, http_scope(path="/a")), call(shared, http_scope(path="/b"))
    )
    assert first[1]["body"] == b"/a" and second[1]["body"] == b"/b"


# --- through the real Django stack ---------------------------------------------------------


async def test_django_through_the_bridge_with_httpx():
    import httpx

    from controlplane.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        health = await client.get("/healthz")
        missing = await client.get("/api/v1/nope/", params={"q": "1"})
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert health.headers["content-type"] == "application/json"
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/json"
    error = missing.json()["errors"][0]
    assert error == {"field": "path", "reason": "no such URL: /api/v1/nope/"}


async def test_django_sees_the_root_path_as_its_script_name():
    from controlplane.asgi import application

    scope = http_scope(path="/loom/api/v1/nope/", root_path="/loom", server=("127.0.0.1", 80))
    scope["headers"] = [(b"host", b"127.0.0.1")]
    sent = await call(application, scope)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 404
    # request.path is SCRIPT_NAME + PATH_INFO; the URL resolver saw only PATH_INFO.
    assert json.loads(sent[1]["body"])["errors"][0]["reason"] == "no such URL: /loom/api/v1/nope/"


async def test_django_file_response_is_streamed_whole():
    import django.contrib.admin

    from controlplane.asgi import application

    expected = (
        Path(django.contrib.admin.__file__).parent / "static/admin/css/base.css"
    ).read_bytes()
    scope = http_scope(path="/static/admin/css/base.css", headers=[(b"host", b"127.0.0.1")])
    sent = await call(application, scope)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/css")
    bodies = sent[1:]
    assert all(m["type"] == "http.response.body" for m in bodies)
    assert all(m.get("more_body") for m in bodies[:-1]) and not bodies[-1].get("more_body")
    assert len(bodies) > 2  # sent in chunks, not whole
    assert b"".join(m["body"] for m in bodies) == expected


# --- header spoofing and late start_response ----------------------------------------------------


def test_header_with_underscore_cannot_spoof_a_hyphenated_one():
    env = environ_for(
        http_scope(headers=[(b"x_forwarded_proto", b"https"), (b"x-forwarded-proto", b"http")])
    )
    assert env.get("HTTP_X_FORWARDED_PROTO") == "http"


async def test_start_response_deferred_to_first_iteration():
    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        yield b"late"

    sent = await call(bridge(app), http_scope())
    assert sent[0] == {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain")],
    }
