"""An emulated engine served in-process on a free port, faster than real time."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from workers.engine.app import EngineApp
from workers.engine.asgi import Server, bind
from workers.engine.core import EmulatedEngine, EngineConfig

FAST = 0.01  # wall seconds per modelled second: a 13 ms decode step takes 0.13 ms


@pytest.fixture
async def engine() -> AsyncIterator[EmulatedEngine]:
    emulated = EmulatedEngine(EngineConfig(time_scale=FAST, max_batch=8))
    yield emulated
    await emulated.stop()


@pytest.fixture
async def server(engine: EmulatedEngine) -> AsyncIterator[Server]:
    served = Server(EngineApp(engine, "tiny"), bind())
    await served.start()
    yield served
    await served.stop()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http
