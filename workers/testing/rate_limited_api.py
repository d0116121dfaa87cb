"""A real local HTTP service with a concurrency limit and a per-period quota (answers 429 above).

The peer that ``api`` actions call in tests, benchmarks and the demo — the kind of external API
arl-tangram §5.1's basic resource manager protects (concurrency-based and quota-based limits).
A tiny ASGI app served by uvicorn on 127.0.0.1 and a free port, in a background thread so sync
and async callers alike can start and stop it:

    with start_rate_limited_api(RateLimit(concurrency=4, quota=50, period_s=1.0)) as api:
        httpx.post(f"{api.url}/call", json={...})
        api.stats()  # served / rejected_concurrency / rejected_quota / max_in_flight

Any path but ``/stats`` is a call: it waits ``latency_s`` then echoes the JSON body.
``python -m workers.testing.rate_limited_api --port 8089`` runs it standalone.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class RateLimit:
    """``concurrency``: calls in flight at once; ``quota`` calls per ``period_s`` window.

    A window opens with the first call after the previous one closed (fixed windows anchored at
    use, so a test never straddles a wall-clock boundary).
    """

    concurrency: int = 4
    quota: int = 100
    period_s: float = 1.0
    latency_s: float = 0.01

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.quota < 1 or self.period_s <= 0 or self.latency_s < 0:
            raise ValueError(f"invalid rate limit {self}")


@dataclass
class ApiStats:
    served: int = 0
    rejected_concurrency: int = 0
    rejected_quota: int = 0
    max_in_flight: int = 0


class RateLimitedApp:
    """The ASGI application (one event loop; counters need no lock)."""

    def __init__(self, limit: RateLimit) -> None:
        self.limit = limit
        self.counters = ApiStats()
        self.in_flight = 0
        self._window_start = -float("inf")
        self._window_count = 0

    def _admit(self) -> str | None:
        """None if the call may proceed, else which limit it hit."""
        if self.in_flight >= self.limit.concurrency:
            self.counters.rejected_concurrency += 1
            return "concurrency"
        now = time.monotonic()
        if now - self._window_start >= self.limit.period_s:  # a window opens at its first call
            self._window_start, self._window_count = now, 0
        if self._window_count >= self.limit.quota:
            self.counters.rejected_quota += 1
            return "quota"
        self._window_count += 1
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            event = await receive()
            body += event.get("body", b"")
            if not event.get("more_body"):
                break
        if scope["path"] == "/stats":
            payload = {**asdict(self.counters), "in_flight": self.in_flight}
            await self._respond(send, 200, payload)
            return
        rejected = self._admit()
        if rejected is not None:
            retry_after = f"{self.limit.period_s:g}" if rejected == "quota" else "0"
            await self._respond(send, 429, {"error": rejected}, [(b"retry-after", retry_after)])
            return
        self.in_flight += 1
        self.counters.max_in_flight = max(self.counters.max_in_flight, self.in_flight)
        try:
            if self.limit.latency_s:
                await asyncio.sleep(self.limit.latency_s)
            try:
                echo = json.loads(body) if body else None
            except ValueError:
                echo = body.decode("utf-8", errors="replace")
            self.counters.served += 1
            await self._respond(send, 200, {"ok": True, "path": scope["path"], "echo": echo})
        finally:
            self.in_flight -= 1

    @staticmethod
    async def _respond(
        send: Send, status: int, payload: object, headers: list[tuple[bytes, str]] | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        raw_headers = [(b"content-type", b"application/json")]
        raw_headers += [(name, value.encode()) for name, value in headers or []]
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": data})


class RunningApi:
    """A started service: ``url``, ``stats()``, ``stop()`` (also a context manager)."""

    def __init__(
        self, app: RateLimitedApp, server: uvicorn.Server, thread: threading.Thread, port: int
    ) -> None:
        self.app = app
        self._server = server
        self._thread = thread
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def stats(self) -> ApiStats:
        counters = self.app.counters
        return ApiStats(**asdict(counters))

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> RunningApi:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_rate_limited_api(limit: RateLimit | None = None, *, port: int = 0) -> RunningApi:
    """Serve on 127.0.0.1 (a free port unless given) in a daemon thread; returns once listening."""
    app = RateLimitedApp(limit or RateLimit())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="rate-limited-api", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("rate-limited API did not start")
        time.sleep(0.01)
    return RunningApi(app, server, thread, sock.getsockname()[1])


@contextmanager
def rate_limited_api(limit: RateLimit | None = None) -> Iterator[RunningApi]:
    """``with rate_limited_api(RateLimit(...)) as api:`` — started, then stopped."""
    running = start_rate_limited_api(limit)
    try:
        yield running
    finally:
        running.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="local rate-limited HTTP API (429 above limits)")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--quota", type=int, default=100)
    parser.add_argument("--period", type=float, default=1.0)
    parser.add_argument("--latency", type=float, default=0.01)
    args = parser.parse_args(argv)
    limit = RateLimit(args.concurrency, args.quota, args.period, args.latency)
    uvicorn.run(RateLimitedApp(limit), host="127.0.0.1", port=args.port, lifespan="off")


if __name__ == "__main__":
    main()
