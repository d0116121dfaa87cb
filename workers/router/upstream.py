"""A small HTTP/1.1 client for the router's hop to the LLM workers: keep-alive, streaming.

The router's added latency is its whole reason to exist or not (the issue's target is half a
millisecond), so the hop to a worker is an ``asyncio.Protocol`` over a pooled keep-alive
connection, parsed by httptools (the C parser uvicorn already uses): no per-request objects
beyond one response, body chunks handed over as they arrive. A general client (httpx) spends
several times that per request on the same loopback hop.

A connection that drops mid-response surfaces as :class:`UpstreamLost` from the body iterator;
``abort()`` closes the connection from our side (a client that went away, a worker declared
dead), which the worker sees as a disconnect.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools


class UpstreamLost(ConnectionError):
    """The worker's connection closed or failed before the response ended."""


class _Connection(asyncio.Protocol):
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.response: UpstreamResponse | None = None
        self.lost: Exception | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.upstream._connections.add(self)

    def data_received(self, data: bytes) -> None:
        response = self.response
        try:
            self.parser.feed_data(data)
            if response is not None and response._sink is not None:
                response._sink.flush()  # what this read brought, relayed in one write
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamLost("unexpected protocol upgrade from the worker"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamLost(f"malformed response from the worker: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.upstream._connections.discard(self)
        self._fail(UpstreamLost(f"worker connection lost: {exc or 'closed'}"))
        del self.parser  # it holds this protocol's callbacks: a cycle left to the collector

    def _fail(self, error: Exception) -> None:
        self.lost = error
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        if self.response is not None:
            self.response._fail(error)

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        assert self.response is not None
        self.response.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        assert self.response is not None
        self.response.status = self.parser.get_status_code()
        self.response._headers_done()

    def on_body(self, body: bytes) -> None:
        assert self.response is not None
        self.response._push(body)

    def on_message_complete(self) -> None:
        response = self.response
        assert response is not None
        keep = self.parser.should_keep_alive()
        self.response = None
        response._complete(keep)


class BodySink(Protocol):
    """Takes a response's body from the socket callbacks (:meth:`UpstreamResponse.attach`)."""

    def feed(self, body: bytes) -> None: ...  # a piece of the body, more may follow in this read
    def flush(self) -> None: ...  # the end of one socket read
    def end(self) -> None: ...  # the whole body arrived
    def lost(self, error: Exception) -> None: ...  # the connection failed before the end


class UpstreamResponse:
    """A response being received: ``status``/``headers`` once :meth:`Upstream.request` returns,
    the body through :meth:`chunks` or :meth:`read`, or handed to a :class:`BodySink` from the
    socket callbacks as it arrives (:meth:`attach`). Release it by reading to the end or
    :meth:`abort`."""

    def __init__(self, upstream: Upstream, connection: _Connection) -> None:
        self._upstream = upstream
        self._connection = connection
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self._chunks: collections.deque[bytes] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._headers = asyncio.get_running_loop().create_future()
        self._done = False
        self._error: Exception | None = None
        self.reused = False  # sent on a pooled connection (retried once if found closed)
        self.aborted = False  # closed from our side (never retried)
        self.request: tuple[str, str, bytes, tuple[tuple[bytes, bytes], ...]] = ("", "", b"", ())
        self._sink: BodySink | None = None

    @property
    def transport(self) -> asyncio.Transport | None:
        """The worker connection's transport (to pause reading it while a client is slow)."""
        return self._connection.transport

    def attach(self, sink: BodySink) -> None:
        """From now on the body goes to ``sink`` from the socket callbacks, with no task
        switch between the worker's bytes and the sink (what arrived before is fed at once)."""
        self._sink = sink
        if self._chunks:
            for chunk in self._chunks:
                sink.feed(chunk)
            self._chunks.clear()
            sink.flush()
        if self._done:
            if self._error is not None:
                sink.lost(self._error)
            else:
                sink.end()

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _headers_done(self) -> None:
        if not self._headers.done():
            self._headers.set_result(None)

    def _push(self, body: bytes) -> None:
        if self._sink is not None:
            self._sink.feed(body)
            return
        self._chunks.append(body)
        self._wake()

    def _complete(self, keep_alive: bool) -> None:
        self._done = True
        self._upstream._release(self._connection, reusable=keep_alive)
        if self._sink is not None:
            self._sink.end()
        self._wake()

    def _fail(self, error: Exception) -> None:
        if self._done:
            return
        self._error = error
        self._done = True
        if not self._headers.done():
            self._headers.set_exception(error)
        if self._sink is not None:
            self._sink.lost(error)
        self._wake()

    @property
    def ended(self) -> bool:
        """The whole body arrived and was handed over (the chunk just taken was the last)."""
        return self._done and self._error is None and not self._chunks

    async def chunks(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive; raises :class:`UpstreamLost` if the connection drops."""
        chunks = self._chunks
        while True:
            if chunks:
                # What piled up while the reader was busy goes out as one piece: one write
                # downstream instead of one per chunk when the router falls behind.
                data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                yield data
                continue
            if self._done:
                if self._error is not None:
                    raise self._error
                return
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    def abort(self) -> None:
        """Close the connection now (the worker sees the client go away)."""
        if not self._done:
            self.aborted = True
            self._connection._fail(UpstreamLost("aborted by the router"))


class Upstream:
    """Pooled keep-alive connections to one worker (``http://host:port``)."""

    def __init__(self, base_url: str, *, connect_timeout_s: float = 2.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"worker URL must be http://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.host = parts.hostname
        self.port = parts.port or 80
        self._host_header = f"{self.host}:{self.port}".encode()
        self._idle: list[_Connection] = []
        self.connect_timeout_s = connect_timeout_s
        self._connections: set[_Connection] = set()  # every open one, idle or busy

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(lambda: _Connection(self), self.host, self.port),
            self.connect_timeout_s,
        )
        return connection

    def _release(self, connection: _Connection, *, reusable: bool) -> None:
        if reusable and not connection.closed:
            self._idle.append(connection)
        else:
            self._drop(connection)

    def _drop(self, connection: _Connection) -> None:
        connection.closed = True
        if connection.transport is not None:
            connection.transport.close()

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> UpstreamResponse:
        """Send a request; return once the response's status and headers are in.

        Raises :class:`UpstreamLost` (or ``OSError``/``TimeoutError`` when connecting) if the
        worker cannot be reached. A pooled connection the worker closed while idle is retried
        once on a fresh one: nothing of the request was processed then.
        """
        response = self.send(method, path, body, headers)
        if response is None:
            response = await self._send_fresh(method, path, body, headers)
        return await self.started(response)

    def send(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: tuple[tuple[bytes, bytes], ...] = (),
    ) -> UpstreamResponse | None:
        """Write the request on a pooled connection now, without yielding to the loop (the
        router's hot path: its bookkeeping runs while the worker already works); None when no
        pooled connection is open (then :meth:`request`, which connects)."""
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                response = self._write(connection, method, path, body, headers)
                response.reused = True
                return response
        return None

    async def _send_fresh(
        self, method: str, path: str, body: bytes, headers: tuple[tuple[bytes, bytes], ...]
    ) -> UpstreamResponse:
        return self._write(await self._connect(), method, path, body, headers)

    def _write(
        self,
        connection: _Connection,
        method: str,
        path: str,
        body: bytes,
        headers: tuple[tuple[bytes, bytes], ...],
    ) -> UpstreamResponse:
        head = b"".join(
            [
                method.encode(), b" ", path.encode(), b" HTTP/1.1\r\nhost: ", self._host_header,
                b"\r\ncontent-length: ", str(len(body)).encode(), b"\r\n",
                *[name + b": " + value + b"\r\n" for name, value in headers],
                b"\r\n",
            ]
        )  # fmt: skip
        response = UpstreamResponse(self, connection)
        response.request = (method, path, body, headers)
        connection.response = response
        assert connection.transport is not None
        if len(body) < 65536:
            connection.transport.write(head + body)
        else:
            connection.transport.write(head)
            connection.transport.write(body)
        return response

    async def started(self, response: UpstreamResponse) -> UpstreamResponse:
        """Wait for the status and headers of a sent request. A pooled connection that turns
        out closed before any answer is retried once on a fresh one (the worker had closed it
        while idle: nothing of the request was processed)."""
        try:
            await response._headers
        except UpstreamLost:
            self._drop(response._connection)
            if response.aborted or not response.reused or response.headers:
                raise
            retry = await self._send_fresh(*response.request)
            try:
                await retry._headers
            except UpstreamLost:
                self._drop(retry._connection)
                raise
            return retry
        return response

    async def close(self) -> None:
        """Close every connection, busy ones too (a request abandoned by a cancelled caller
        would otherwise hold its connection open until the worker ends it)."""
        self._idle.clear()
        for connection in list(self._connections):
            self._drop(connection)
