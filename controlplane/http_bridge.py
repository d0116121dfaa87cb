"""HTTP under the ASGI server: each request runs whole in one pooled worker thread.

Django's own ASGI handler runs a sync view through many thread hops: a new thread per request
(asgiref's ``ThreadSensitiveContext``) and two ``sync_to_async`` calls per ``MiddlewareMixin``
middleware: before the view does anything, many times what the same request costs through
Django's WSGI handler (``python -m bench overhead`` records both). Every Loom view is sync, so
this bridge reads the request body on the event loop, runs Django's WSGI handler in a fixed pool
of threads — one hop — and sends the response back.
Websockets (the dashboard's ``/ws/``) stay on Channels; see ``controlplane/asgi.py``.

The pool is ``LOOM_WEB_THREADS`` threads: that many requests run at once (a long-polling
``result?wait=`` holds one, without a database connection while it waits); more wait for a
thread. A client that hangs up while its view runs is noticed on the event loop: the view finds a
``Hangup`` in its environ (``HANGUP_KEY``) and a long-poll registers there to end its wait at
once, so abandoned long-polls do not hold threads for their whole ``wait``. Its answer is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import IO, Any, Literal

from django.conf import settings

from controlplane.api.errors import error_body
from controlplane.api.limits import too_large
from workers.threads import OwnThreads

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


HANGUP_KEY = "loom.hangup"


class Hangup:
    """The client of one request hung up (or not yet): callbacks registered by the view run
    once, on the event loop's thread, when it does — at once if it already has."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []
        self.happened = False

    def on_hangup(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if not self.happened:
                self._callbacks.append(callback)
                return
        callback()

    def fire(self) -> None:
        with self._lock:
            if self.happened:
                return
            self.happened = True
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()


class WsgiBridge:
    """An ASGI HTTP application serving a WSGI application from a thread pool."""

    def __init__(self, wsgi: WsgiApp, *, threads: int, spool_bytes: int) -> None:
        self.wsgi = wsgi
        self.spool_bytes = spool_bytes  # beyond, the body waits on disk
        # Started on first use, in the serving process (a server may fork after import).
        self.threads = OwnThreads(threads, "loom-http")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            raise ValueError(f"the HTTP bridge serves http, not {scope['type']!r}")
        loop = asyncio.get_running_loop()
        with tempfile.SpooledTemporaryFile(max_size=self.spool_bytes) as body:
            outcome = await self._read_body(receive, body)
            if outcome is None:
                return  # the client hung up before sending its body
            if outcome is not True:
                await _send_error(send, 400, "body", outcome)
                return
            environ = wsgi_environ(scope, body)
            hangup = environ[HANGUP_KEY] = Hangup()
            watcher = asyncio.create_task(self._watch_for_hangup(receive, hangup))
            try:
                whole = await self.threads.run(self._respond, environ, send, loop)
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
        if whole is not None:
            head, content = whole
            await send(head)
            await send({"type": "http.response.body", "body": content})

    @staticmethod
    async def _read_body(receive: Receive, body: IO[bytes]) -> Literal[True] | str | None:
        """The whole body into ``body`` (in memory up to ``spool_bytes``, on disk beyond): True;
        None if the client hung up first; the refusal's reason once it passes the size limit
        (``controlplane.api.limits``: checked here too, so an endless body never fills the disk).
        """
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if (refusal := too_large(size)) is not None:
                return refusal.reason
            body.write(chunk)
            if not message.get("more_body", False):
                return True

    @staticmethod
    async def _watch_for_hangup(receive: Receive, hangup: Hangup) -> None:
        """After the body, the server's next message is ``http.disconnect``: the client hung
        up (this watcher is cancelled before the response is sent). Anything else (a server
        that repeats body messages) ends the watch: never a busy loop."""
        if (await receive())["type"] == "http.disconnect":
            hangup.fire()

    def _respond(
        self, environ: dict[str, Any], send: Send, loop: asyncio.AbstractEventLoop
    ) -> tuple[Message, bytes] | None:
        """(Worker thread) Run the view. A plain response comes back whole (the event loop sends
        it); a streaming one is sent from here chunk by chunk, so it is never held in memory."""
        started: dict[str, Any] = {}
        written: list[bytes] = []  # PEP 3333's legacy write(): kept, sent before the iterable

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            started["status"] = int(status.split(" ", 1)[0])
            started["headers"] = [
                (name.lower().encode("latin1"), value.encode("latin1")) for name, value in headers
            ]
            return written.append

        async def sending(message: Message) -> None:
            await send(message)

        def send_now(message: Message) -> None:
            asyncio.run_coroutine_threadsafe(sending(message), loop).result()

        response = self.wsgi(environ, start_response)
        try:
            if getattr(response, "streaming", False):
                chunks = iter(response)
                first = [] if started else [next(chunks, b"")]  # start_response may come late
                send_now({"type": "http.response.start", **started})
                for chunk in itertools.chain(written, first, chunks):
                    if chunk:
                        send_now({"type": "http.response.body", "body": chunk, "more_body": True})
                send_now({"type": "http.response.body", "body": b""})
                return None
            content = b"".join(response)
            return {"type": "http.response.start", **started}, b"".join(written) + content
        finally:
            close = getattr(response, "close", None)
            if close is not None:
                close()


async def _send_error(send: Send, status: int, field: str, reason: str) -> None:
    """An answer in the API's error shape, sent without Django (nothing of the request ran)."""
    content = json.dumps(error_body(field=field, reason=reason)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": content})


def wsgi_environ(scope: Scope, body: IO[bytes]) -> dict[str, Any]:
    """PEP 3333 environ for an ASGI HTTP scope whose body has been read into ``body``."""
    root = scope.get("root_path", "")
    path = scope["path"]
    if root and path.startswith(root):
        path = path[len(root) :]
    server = scope.get("server") or ("localhost", 80)
    length = body.seek(0, 2)
    body.seek(0)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": root.encode("utf-8").decode("latin1"),
        "PATH_INFO": path.encode("utf-8").decode("latin1"),
        "QUERY_STRING": scope["query_string"].decode("latin1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or 80),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "CONTENT_LENGTH": str(length),  # the body is whole: chunked uploads get their length
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.input": body,
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
    }
    client = scope.get("client")
    if client:
        environ["REMOTE_ADDR"], environ["REMOTE_PORT"] = str(client[0]), str(client[1])
    for raw_name, raw_value in scope.get("headers", []):
        if b"_" in raw_name:
            # 'X_Forwarded_Proto' would alias HTTP_X_FORWARDED_PROTO: dropped, as Django's own
            # ASGI handler and runserver drop them.
            continue
        name = raw_name.decode("latin1").upper().replace("-", "_")
        if name == "CONTENT_LENGTH":
            continue
        key = name if name == "CONTENT_TYPE" else f"HTTP_{name}"
        value = raw_value.decode("latin1")
        environ[key] = f"{environ[key]},{value}" if key in environ else value
    return environ


def django_http_application() -> WsgiBridge:
    """Django's WSGI handler behind the bridge, sized by ``settings.LOOM_WEB_THREADS``."""
    from django.core.wsgi import get_wsgi_application

    return WsgiBridge(
        get_wsgi_application(),
        threads=settings.LOOM_WEB_THREADS,
        spool_bytes=settings.FILE_UPLOAD_MAX_MEMORY_SIZE,
    )
