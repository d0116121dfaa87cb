"""A lean HTTP/1.1 server for the router's own ASGI app: an ``asyncio.Protocol`` per connection,
parsed by httptools, no framework between the socket and :class:`~workers.router.app.RouterApp`.

uvicorn serves any ASGI app and pays for it on every request (a request-response cycle object,
header validation, a flow-control object, the full ASGI scope) and every response chunk (a
message dispatch through its state machine). The router serves one app whose requests are small
JSON bodies and whose answers are JSON or SSE; this server does only what that needs:

- a request runs once its body is complete (bodies are small; more than ``MAX_BODY_BYTES`` is a
  413 without running the app), with ``receive()`` answering that body and then, only when the
  client goes away, ``http.disconnect`` (how the router learns to abort a request);
- responses with a known length (``content-length`` given, or the whole body in one message)
  go out as one write, head and body together; streamed ones use chunked encoding, each body
  message one write;
- keep-alive (requests on one connection answered in order), ``Expect: 100-continue``, a 400
  for what httptools cannot parse, writes paused while the socket's buffer is full.

Not served: upgrades (WebSocket), HTTP/2, request trailers.

A streamed generation answer is written from the worker connection's socket callbacks
(:mod:`workers.router.relay`, ``scope["extensions"]["loom.raw_stream"]``). The router serves on
uvicorn unless ``--http-server lean`` is given: this server spends less of the router's CPU per
request (bench ``router_overhead`` measures both servers in every run).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
from typing import Any, cast
from urllib.parse import unquote

import httptools

from workers.cancelling import cancel_all_and_wait
from workers.engine.asgi import MAX_BODY_BYTES, App, Message, Server

log = logging.getLogger("loom.router.server")

_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 413: b"Payload Too Large"}
_ERROR_500 = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


def _plain(status: int, text: bytes) -> bytes:
    reason = _REASONS.get(status, b"Error")
    return b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n" \
        b"connection: close\r\n\r\n%s" % (status, reason, len(text), text)  # fmt: skip


class _Request:
    """One request's ASGI side: ``receive`` and ``send`` as the app sees them."""

    __slots__ = (
        "body", "body_sent", "chunked", "conn", "done", "keep_alive", "scope", "started", "written"
    )  # fmt: skip

    def __init__(self, conn: _Connection, scope: dict[str, Any], keep_alive: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.body = b""
        self.keep_alive = keep_alive
        self.body_sent = False
        self.started: list[bytes] | None = None  # the response head, written with the body
        self.chunked = False
        self.written = False  # the head went out (a 500 can no longer replace the answer)
        self.done = False

    # The raw stream (scope["extensions"]["loom.raw_stream"]): a streamed answer written from
    # a socket callback (the router relays a worker's bytes as they arrive), no await.
    def stream_start(self, headers: list[tuple[bytes, bytes]]) -> None:
        """A 200 with ``headers``, chunked: the head goes out with the first chunk."""
        self.started = [b"HTTP/1.1 200 OK\r\n"]
        self.started += [name + b": " + value + b"\r\n" for name, value in headers]
        if not self.keep_alive:
            self.started.append(b"connection: close\r\n")
        self.started.append(b"transfer-encoding: chunked\r\n\r\n")
        self.chunked = True

    def stream_write(self, data: bytes, *, last: bool = False) -> None:
        """One chunk (and the end of the answer when ``last``), one write."""
        conn = self.conn
        if conn.closed or self.done:
            return
        out = b"%x\r\n%s\r\n" % (len(data), data) if data else b""
        if last:
            out += b"0\r\n\r\n"
        first = self.started
        if first is not None:
            self.started = None
            self.written = True
            out = b"".join(first) + out
        if out:
            conn.transport.write(out)
        if last:
            self.done = True
            conn.finished(self)

    def stream_throttle(self, upstream: asyncio.Transport | None) -> None:
        """Reading ``upstream`` pauses while this client's socket buffer is full."""
        self.conn.throttled = upstream
        if upstream is not None and self.conn.paused is not None:
            upstream.pause_reading()

    async def receive(self) -> Message:
        if not self.body_sent:
            self.body_sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        conn = self.conn
        if not conn.closed and not self.done:
            await conn.disconnected  # answers only when the client goes away
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        conn = self.conn
        if conn.closed or self.done:
            return
        kind = message["type"]
        if kind == "http.response.start":
            status = int(message["status"])
            head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b""))]
            length = False
            for name, value in message.get("headers", ()):
                if name.lower() == b"content-length":
                    length = True
                head.append(bytes(name) + b": " + bytes(value) + b"\r\n")
            if not self.keep_alive:
                head.append(b"connection: close\r\n")
            if length:
                head.append(b"\r\n")
            self.started = head
            self.chunked = not length
            return
        if kind != "http.response.body":
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        transport = conn.transport
        first = self.started
        if first is not None:  # the first body message: the head goes out with it
            self.started = None
            self.written = True
            if self.chunked and not more:  # the whole body in one message: its length is known
                self.chunked = False
                first.append(b"content-length: %d\r\n\r\n" % len(body))
                transport.write(b"".join(first) + body)
            elif self.chunked:
                first.append(b"transfer-encoding: chunked\r\n\r\n")
                if body:
                    first.append(b"%x\r\n%s\r\n" % (len(body), body))
                transport.write(b"".join(first))
            else:
                transport.write(b"".join(first) + body)
        elif self.chunked:
            if body and more:
                transport.write(b"%x\r\n%s\r\n" % (len(body), body))
            elif body:
                transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
            elif not more:
                transport.write(b"0\r\n\r\n")
        elif body:
            transport.write(body)
        if not more:
            self.done = True
            conn.finished(self)
        elif conn.paused is not None:
            await conn.paused


class _Connection(asyncio.Protocol):
    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = cast(asyncio.Transport, None)
        self.parser = httptools.HttpRequestParser(self)
        self.closed = False
        self.disconnected: asyncio.Future[None] = self.loop.create_future()
        self.paused: asyncio.Future[None] | None = None
        self.throttled: asyncio.Transport | None = None  # a worker's, relayed from a callback
        self.current: _Request | None = None
        self.waiting: collections.deque[_Request] = collections.deque()
        # the request being parsed
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._body: list[bytes] = []
        self._size = 0
        self._client: tuple[str, int] | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self._client = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._refuse(400, b"upgrades are not served")
        except httptools.HttpParserError as exc:
            self._refuse(400, f"malformed HTTP request: {exc}".encode())

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        del self.parser  # it holds this protocol's callbacks: a cycle left to the collector
        if not self.disconnected.done():
            self.disconnected.set_result(None)
        self.resume_writing()

    def pause_writing(self) -> None:
        if self.paused is None:
            self.paused = self.loop.create_future()
        if self.throttled is not None:
            self.throttled.pause_reading()

    def resume_writing(self) -> None:
        if self.throttled is not None and not self.throttled.is_closing():
            self.throttled.resume_reading()
        paused, self.paused = self.paused, None
        if paused is not None and not paused.done():
            paused.set_result(None)

    def _refuse(self, status: int, text: bytes) -> None:
        if not self.closed:
            self.transport.write(_plain(status, text))
            self.transport.close()
            self.closed = True

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url, self._headers, self._body, self._size = b"", [], [], 0

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if (b"expect", b"100-continue") in self._headers:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > MAX_BODY_BYTES:
            self._refuse(413, b"body larger than %d bytes" % MAX_BODY_BYTES)
            raise httptools.HttpParserError("body too large")
        self._body.append(body)

    def on_message_complete(self) -> None:
        raw_path, _, query = self._url.partition(b"?")
        path = raw_path.decode("latin-1")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": self.parser.get_http_version(),
            "method": self.parser.get_method().decode("ascii"),
            "scheme": "http",
            "path": unquote(path) if "%" in path else path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": self._headers,
            "client": self._client,
            "server": self.server.address,
        }
        request = _Request(self, scope, self.parser.should_keep_alive())
        scope["extensions"] = {"loom.raw_stream": request}
        body = self._body
        request.body = body[0] if len(body) == 1 else b"".join(body)
        if self.current is None:
            self._run(request)
        else:  # pipelined: answered after the one in progress
            self.waiting.append(request)

    # requests
    def _run(self, request: _Request) -> None:
        self.current = request
        task = self.loop.create_task(self._serve(request))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    async def _serve(self, request: _Request) -> None:
        try:
            await self.server.app(request.scope, request.receive, request.send)
        except Exception:
            log.exception("the router app failed on %s %s", request.scope["method"],
                          request.scope["path"])  # fmt: skip
            if not request.done and not self.closed:
                if not request.written:
                    self.transport.write(_ERROR_500)
                self.transport.close()
                self.closed = True
            return
        finally:
            # The scope's raw stream is the request itself: a cycle only the collector's full
            # pass would free (requests outlive its young generations), paused the loop for.
            request.scope.pop("extensions", None)
        if not request.done and not self.closed:  # the app ended without finishing its answer
            log.error("the router app left %s %s unanswered", request.scope["method"],
                      request.scope["path"])  # fmt: skip
            self.transport.close()
            self.closed = True

    def finished(self, request: _Request) -> None:
        """The response is complete: next request on this connection, or close it."""
        self.current = None
        if self.throttled is not None:
            if self.paused is not None and not self.throttled.is_closing():
                self.throttled.resume_reading()
            self.throttled = None
        if not request.keep_alive:
            self.transport.close()
            self.closed = True
            return
        if self.waiting:
            self._run(self.waiting.popleft())


class LeanServer:
    """Serves ``app`` on ``sock`` in the running loop; the interface of
    :class:`workers.engine.asgi.Server` (``start``, ``stop``, ``serve_forever``, ``url``)."""

    def __init__(self, app: App, sock: socket.socket) -> None:
        self.app = app
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.address: tuple[str, int] = sock.getsockname()[:2]
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.AbstractServer | None = None
        self._stopped: asyncio.Event | None = None
        self._draining = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, *, handle_signals: bool = False) -> None:
        loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        self._server = await loop.create_server(
            lambda: _Connection(self), sock=self.sock, backlog=2048
        )
        if handle_signals:
            import signal

            for number in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(number, self._signalled)

    def _signalled(self) -> None:
        """First signal: stop accepting and let the requests in progress finish (as uvicorn
        does); a second: stop now."""
        assert self._stopped is not None
        if self._draining:
            self._stopped.set()
            return
        self._draining = True
        if self._server is not None:
            self._server.close()
        asyncio.get_running_loop().create_task(self._drained())

    async def _drained(self) -> None:
        while self.tasks:
            await asyncio.wait(list(self.tasks))
        assert self._stopped is not None
        self._stopped.set()

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.connections):
            conn.transport.close()
        await cancel_all_and_wait(self.tasks)
        await self._server.wait_closed()
        self._server = None
        if self._stopped is not None:
            self._stopped.set()

    async def serve_forever(self) -> None:
        """The CLI's main: SIGINT/SIGTERM end it once the requests in progress have finished
        (a second signal: at once)."""
        await self.start(handle_signals=True)
        assert self._stopped is not None
        await self._stopped.wait()
        await self.stop()


SERVERS: dict[str, Any] = {"lean": LeanServer, "uvicorn": Server}
DEFAULT_SERVER = "uvicorn"


def make_server(app: App, sock: socket.socket, kind: str = DEFAULT_SERVER) -> LeanServer | Server:
    """The router's HTTP server: ``lean`` (this module) or ``uvicorn``."""
    return cast("LeanServer | Server", SERVERS[kind](app, sock))
