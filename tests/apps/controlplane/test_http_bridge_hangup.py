"""The HTTP bridge and a client that hangs up while its view runs: the view's wait ends at once
and an abandoned long-poll does not hold a real server's thread (``controlplane.http_bridge``)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from controlplane.http_bridge import HANGUP_KEY, Hangup, Message, WsgiApp
from tests.apps.controlplane.test_http_bridge import (
    StartResponse,
    body_messages,
    bridge,
    http_scope,
)

# --- a client that hangs up while its view runs ----------------------------------------------


def _waiting_app(seconds: float, woken: list[bool]) -> WsgiApp:
    """A view that long-polls: registers with the request's Hangup and waits up to ``seconds``."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        event = threading.Event()
        environ[HANGUP_KEY].on_hangup(event.set)
        woken.append(event.wait(seconds))
        start_response("200 OK", [])
        return [b"late"]

    return app


async def test_a_hang_up_while_the_view_waits_ends_its_wait() -> None:
    woken: list[bool] = []
    incoming = body_messages(b"")

    async def receive() -> Message:
        if incoming:
            return incoming.pop(0)
        await asyncio.sleep(0.2)  # the client goes away while the view waits
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    started = asyncio.get_running_loop().time()
    await bridge(_waiting_app(20, woken))(http_scope(), receive, send)
    assert woken == [True]
    assert asyncio.get_running_loop().time() - started < 5


async def test_no_hang_up_is_seen_when_the_client_stays() -> None:
    woken: list[bool] = []
    incoming = body_messages(b"")
    stays = asyncio.Event()  # never set: the server says nothing until the response is sent

    async def receive() -> Message:
        if incoming:
            return incoming.pop(0)
        await stays.wait()
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await bridge(_waiting_app(0.3, woken))(http_scope(), receive, send)
    assert woken == [False]  # waited its whole time, then answered
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


def test_hangup_runs_each_callback_once_and_late_ones_at_once() -> None:
    hangup = Hangup()
    calls: list[str] = []
    hangup.on_hangup(lambda: calls.append("early"))
    hangup.fire()
    hangup.fire()
    hangup.on_hangup(lambda: calls.append("late"))
    assert calls == ["early", "late"] and hangup.happened


@pytest.mark.processes
def test_abandoned_long_polls_do_not_hold_a_real_servers_threads(tmp_path: Path) -> None:
    """uvicorn, a bridge of 2 threads, 6 long-polls whose clients hang up: the next request is
    served at once (it would queue ~30 s behind them if hang-ups went unnoticed)."""
    import socket
    import subprocess
    import sys

    from tests.apps.controlplane import bridge_app

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = (tmp_path / "uvicorn.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", f"{bridge_app.__name__}:make_app",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and server.poll() is None, "uvicorn did not start"
            time.sleep(0.1)
        clients = [
            socket.create_connection(("127.0.0.1", port)) for _ in range(3 * bridge_app.THREADS)
        ]
        for client in clients:
            client.sendall(b"GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.5)  # the first ones wait in the pool's threads, the rest queue for them
        for client in clients:
            client.close()
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", port), timeout=20) as client:
            client.sendall(b"GET /now HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = client.recv(1024)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert time.monotonic() - started < 5, "hung-up long-polls still held the threads"
    finally:
        server.terminate()
        server.wait(10)
        log.close()
