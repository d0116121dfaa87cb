"""Plain-ASGI plumbing shared by the emulated engine and the router: bodies, JSON, SSE, serving.

No framework: one request costs uvicorn's httptools parse plus a few dict operations, which is
the overhead budget the router lives in. ``serve`` runs an ASGI app on uvicorn (uvloop,
httptools), on a given socket so tests and benches can bind port 0 first.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn

from workers.cancelling import cancel_all_and_wait

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 16 * 1024 * 1024
JSON_HEADERS = [(b"content-type", b"application/json")]
SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache"),
]


class BodyTooLarge(ValueError):
    pass


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


async def read_body(receive: Receive) -> bytes | None:
    """The request body; None when the client went away before sending all of it."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise BodyTooLarge(f"body larger than {MAX_BODY_BYTES} bytes")
            chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks) if len(chunks) != 1 else chunks[0]


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    await send(
        {"type": "http.response.start", "status": status, "headers": headers or JSON_HEADERS}
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, value: Any, extra_headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = JSON_HEADERS + (extra_headers or [])
    await send_bytes(send, status, dumps(value), headers)


async def start_sse(send: Send, extra_headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": SSE_HEADERS + (extra_headers or []),
        }
    )


def sse_event(value: Any) -> bytes:
    return b"data: " + dumps(value) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def header(scope: Scope, name: bytes) -> str | None:
    """A request header (``name`` lower-case), decoded; None when absent."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return None


def bind(host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A listening socket (port 0: the kernel picks a free one; read it from getsockname)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


class Server:
    """An ASGI app served by uvicorn inside the running event loop (tests, benches, CLIs)."""

    def __init__(self, app: App, sock: socket.socket) -> None:
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        config = uvicorn.Config(
            app,
            http="httptools",
            loop="none",
            lifespan="off",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=300,
            backlog=2048,
            proxy_headers=False,  # no proxy in front: the forwarded-header middleware is waste
        )
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self, *, handle_signals: bool = False) -> None:
        """Serve in the background. Embedded servers (tests, benches) leave the process's signal
        handlers alone: ``serve`` would swap them in and restore them in its own order."""
        server = self._server
        coroutine = server.serve([self.sock]) if handle_signals else server._serve([self.sock])
        self._task = asyncio.get_running_loop().create_task(coroutine)
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        if self._task is None:
            return
        self._server.should_exit = True
        self._server.force_exit = True
        await self._task
        self._task = None
        # A forced exit leaves the requests in progress running: they end here, so that nothing
        # of this server outlives its stop (nor waits for the loop's close to be cancelled).
        await cancel_all_and_wait(self._server.server_state.tasks)

    async def serve_forever(self) -> None:
        """The CLIs' main: SIGINT/SIGTERM end it gracefully."""
        await self.start(handle_signals=True)
        assert self._task is not None
        await self._task
