"""The SDK's HTTP stack (httpx → httpcore) must not search for modules on every request: without
``sniffio`` installed, httpcore retries a failed ``import sniffio`` per lock it creates, a full
``sys.path`` scan each time (encode/httpcore#1103; requirements pin sniffio for it)."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from loom import AsyncClient

BODY = b'{"id": 7, "status": "queued"}'
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


class _CountingFinder:
    """A meta-path finder that finds nothing and counts the lookups it is asked for."""

    def __init__(self) -> None:
        self.lookups: list[str] = []

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        self.lookups.append(name)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionResetError):
        pass
    finally:
        writer.close()


async def test_requests_resolve_no_imports() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    finder = _CountingFinder()
    try:
        async with AsyncClient(f"http://127.0.0.1:{port}", "loom_test") as client:
            assert (await client.get(7)).status == "queued"  # first use may import lazily, once
            sys.meta_path.insert(0, finder)
            try:
                for _ in range(20):
                    await client.get(7)
            finally:
                sys.meta_path.remove(finder)
    finally:
        server.close()
        await server.wait_closed()
    assert finder.lookups == [], f"imports searched per request: {sorted(set(finder.lookups))}"
