"""LLM generation in the embedded mode: the CPU engine and the router, in the demo's process.

Production runs ``python -m workers.engine`` per LLM worker and ``python -m workers.router`` in
front of them, both reading the control plane's keys and trajectories from Redis. The embedded
mode has no Redis, so the same router answers from the database instead (``DatabaseRegistry``)
and the trajectory state it publishes is written to the rows directly (``router_states_apply``,
what the production drain applies) and kept for the Rollouts page (``router_states_keep``, what
it reads of the production stream); the routing policy an operator sets on that page is read
from its row (``DatabasePolicyStore``) by the production router's own ``PolicyFeed``. The
engine is llama.cpp decoding the project's own small model (``workers.engine.tiny_model``),
written under ``var/models`` on first use.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.dashboard.router_stream import router_states_forget, router_states_keep
from apps.jobs.authentication import hash_key
from apps.jobs.router_keys import router_keys_served
from apps.trajectories.models import RouterPolicy
from apps.trajectories.router_control import router_policy_stored
from apps.trajectories.router_registry import router_trajectories_served
from apps.trajectories.router_state import router_states_apply
from workers.cancelling import cancel_all_and_wait
from workers.engine.app import EngineApp
from workers.engine.asgi import Server, bind
from workers.engine.llamacpp import LlamaCppConfig, LlamaCppEngine
from workers.engine.tiny_model import tiny_model
from workers.router.app import RouterApp
from workers.router.live_policy import PolicyFeed
from workers.router.policies import make_policy
from workers.router.pool import WorkerPool
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.embedded.llm")

STATE_FLUSH_S = 0.5


class DatabaseRegistry:
    """The router's ``ControlPlaneRegistry`` read from the database (the embedded mode), by
    the same rules the production registry's sync writes Redis from."""

    async def job_of_key(self, raw_key: str) -> str | None:
        def lookup() -> str | None:
            served = router_keys_served().filter(key_hash=hash_key(raw_key))
            job = served.values_list("job_id", flat=True).first()
            return None if job is None else str(job)

        return await asyncio.to_thread(lookup)

    async def job_of_trajectory(self, trajectory_id: str) -> str | None:
        if not trajectory_id.isdigit():
            return None

        def lookup() -> str | None:
            served = router_trajectories_served().filter(pk=int(trajectory_id))
            job = served.values_list("job_id", flat=True).first()
            return None if job is None else str(job)

        return await asyncio.to_thread(lookup)


class DatabasePolicyStore:
    """``PolicyFeed``'s store read from the database (the embedded mode): the stored policy of
    ``router``, as the production sync writes it to Redis (``router_policy_stored``)."""

    def __init__(self, router: str) -> None:
        self.router = router

    async def get(self, key: str) -> str | None:
        def lookup() -> str | None:
            row = RouterPolicy.objects.select_related("changed_by").filter(router=self.router)
            stored = row.first()
            return None if stored is None else router_policy_stored(stored)

        return await asyncio.to_thread(lookup)


class EmbeddedLlm:
    """The CPU engine on a free loopback port and the router on ``host:port``."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, slots: int = 2) -> None:
        self.host, self.port, self.slots = host, port, slots
        self.engine: LlamaCppEngine | None = None
        self.model_name = ""
        self._servers: list[Server] = []
        self._pool: WorkerPool | None = None
        self._states: list[Mapping[str, Any]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._policy_feed: PolicyFeed | None = None
        self.router: RouterApp | None = None

    @property
    def url(self) -> str:
        """The router's base URL (OpenAI clients use ``{url}/v1``)."""
        return self._servers[-1].url

    async def start(self) -> None:
        path = await asyncio.to_thread(tiny_model, Path(settings.VAR_DIR) / "models")
        self.engine = LlamaCppEngine(path, LlamaCppConfig(slots=self.slots, context=4096))
        self.model_name = path.stem
        engine_server = Server(EngineApp(self.engine, self.model_name), bind())
        await engine_server.start()
        self._servers.append(engine_server)
        self._pool = WorkerPool([engine_server.url])
        await self._pool.start()
        router = RouterApp(
            self._pool,
            make_policy("heddle", batch_limit=self.slots),
            registry=DatabaseRegistry(),
            models=(self.model_name,),
            publish=self._states.append,
        )
        self.router = router
        router_server = Server(router, bind(self.host, self.port))
        await router_server.start()
        self._servers.append(router_server)
        self._policy_feed = PolicyFeed(
            DatabasePolicyStore(router.name), RegistryNames(""), router.name, router.forwarder,
            lambda name: make_policy(name, batch_limit=self.slots),
        )  # fmt: skip
        await self._policy_feed.start()
        self._flusher = asyncio.create_task(self._flush_states())
        log.info("LLM router on %s/v1 serving %s (llama.cpp)", self.url, self.model_name)

    async def _flush_states(self) -> None:
        while True:
            await asyncio.sleep(STATE_FLUSH_S)
            await self._flush()

    async def _flush(self) -> None:
        states, self._states[:] = list(self._states), []
        if states:
            router_states_keep(states)  # the Rollouts page's priorities and group rollouts
            try:
                await asyncio.to_thread(router_states_apply, states)
            except Exception:
                log.exception("trajectory state from the router not written")

    async def stop(self) -> None:
        if self._policy_feed is not None:
            await self._policy_feed.stop()
        if self._flusher is not None:
            await cancel_all_and_wait((self._flusher,))
            await self._flush()
        router_states_forget()
        for server in reversed(self._servers):
            await server.stop()
        if self._pool is not None:
            await self._pool.close()
        if self.engine is not None:
            await self.engine.stop()
