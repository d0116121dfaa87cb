"""``loom``: the SDK's AsyncClient on the embedded runtime (the demo's process tree: in-process
transport, the real Django store, a real local-backend agent on this machine's cores)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from loom import AsyncClient

from apps.actions.runtime import EmbeddedRuntime
from apps.resources.models import PoolKind
from controlplane.asgi import application
from tests.factories import JobFactory, PoolFactory, ToolFactory, make_key


@pytest.fixture
async def loom(tmp_path: Path) -> AsyncIterator[tuple[AsyncClient, EmbeddedRuntime]]:
    def set_up() -> str:
        pool = PoolFactory.create(name="cpu", kind=PoolKind.CPU)
        # Created before the runtime starts: on SQLite (in-memory, shared cache) a write racing
        # the runtime's store threads fails with "database table is locked".
        ToolFactory.create(name="suite", command_template="echo dop={dop}", pool=pool)
        return make_key(job=JobFactory.create())[1]

    raw_key = await asyncio.to_thread(set_up)
    runtime = EmbeddedRuntime(work_root=tmp_path, cores=[0, 1])
    await runtime.start()
    client = AsyncClient(
        "http://testserver", raw_key, transport=httpx.ASGITransport(app=application)
    )
    try:
        yield client, runtime
    finally:
        await client.close()
        await runtime.stop()
