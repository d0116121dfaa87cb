"""``loom``: the SDK's AsyncClient on the embedded runtime (the demo's process tree: in-process
transport, the real Django store, a real local-backend agent on this machine's cores).
``cluster``: a pool's processes as real subprocesses on Redis and PostgreSQL (``cluster.py``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from django.db import connection
from django.test import override_settings
from loom import AsyncClient

from apps.embedded.runtime import EmbeddedRuntime
from apps.resources.models import PoolKind
from controlplane.asgi import application
from tests.apps.actions.cluster import Cluster
from tests.factories import JobFactory, PoolFactory, ToolFactory, make_key
from tests.workers.agents.conftest import leftover_processes
from workers.agents.common import procs


@pytest.fixture
async def loom(
    tmp_path: Path, starts_processes: None
) -> AsyncIterator[tuple[AsyncClient, EmbeddedRuntime]]:
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


@pytest.fixture
def postgres_url() -> str:
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL: the scheduler and agents are separate processes sharing the test "
            "database (set DATABASE_URL=postgres://...)"
        )
    db = connection.settings_dict
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"


@pytest.fixture
def cluster(
    redis_url: str, postgres_url: str, tmp_path: Path, starts_processes: None
) -> Iterator[Cluster]:
    pool = f"rec-{uuid.uuid4().hex[:8]}"
    PoolFactory.create(name=pool, kind=PoolKind.CPU)
    running = Cluster(redis_url=redis_url, database_url=postgres_url, work=tmp_path, pool=pool)
    try:
        # The API side announces submissions to the pool's scheduler over Redis, as in production.
        with override_settings(REDIS_URL=redis_url, LOOM_STREAM_PREFIX=running.prefix):
            yield running
    finally:
        running.stop_all()
        for pid in leftover_processes(f"{pool}-"):  # what a SIGKILLed agent left running
            procs.kill_pids([pid])
