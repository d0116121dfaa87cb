"""What the router learns from the control plane, and tells it, through Redis only (DESIGN.md:
"Agents and the router must not need Django or a database").

Keys (``prefix`` as everywhere, default ``loom``):

- ``{prefix}:router:keys`` — hash, ``sha256(raw API key)`` → job id, for every active job key.
  The control plane writes it when a key is created and deletes the field when it is revoked
  (``apps.jobs.router_keys``); the raw key never leaves the caller, as in the database.
- ``{prefix}:router:trajectories`` — hash, trajectory id → job id, written by the control plane
  when a trajectory is registered (``POST /api/v1/trajectories``).
- ``{prefix}:auth-changed`` — the control plane's existing pub/sub channel, announced on every
  key, job or user change (``apps.jobs.key_cache``): the router drops its cached keys on it.
- ``{prefix}:router:trajectory-state`` — stream the router appends trajectory state to (one
  entry per change, each carrying the whole state, so a consumer needs only the latest entry per
  trajectory); the control plane's consumer persists it to the ``Trajectory`` rows. After every
  poll of the workers' metrics the router also appends a ``workers`` entry (each worker's
  health, in-flight requests and the engine's own running/queued requests and KV use).
- ``{prefix}:router:policy:{router}`` — the routing policy and predictor an operator chose on
  the dashboard (JSON with a version), followed by the router (``live_policy``).

Lookups are cached in memory: a trajectory's job never changes (cached for good once found); a
key's job is cached only while the router is subscribed to ``auth-changed`` and at most
``KEY_CACHE_TTL_S`` (the control plane's own rule), unknown keys and trajectories never.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from workers.cancelling import cancel_and_wait

log = logging.getLogger("loom.router")

KEY_CACHE_TTL_S = 10.0
TRAJECTORY_CACHE_MAX = 200_000  # trajectory → job entries held; past it the cache restarts
STATE_STREAM_MAXLEN = 100_000  # whole-state entries: dropping old ones loses nothing current


@dataclass(frozen=True)
class RegistryNames:
    prefix: str = "loom"

    @property
    def keys(self) -> str:
        return f"{self.prefix}:router:keys"

    @property
    def trajectories(self) -> str:
        return f"{self.prefix}:router:trajectories"

    @property
    def auth_changed(self) -> str:
        return f"{self.prefix}:auth-changed"

    @property
    def trajectory_state(self) -> str:
        return f"{self.prefix}:router:trajectory-state"

    @property
    def length_predictor(self) -> str:
        """The control plane's newest trained length predictor (a pickle, heddle §4.1)."""
        return f"{self.prefix}:router:length-predictor"

    def router_policy(self, router: str) -> str:
        """The routing policy and predictor an operator chose for ``router`` (JSON)."""
        return f"{self.prefix}:router:policy:{router}"

    @property
    def router_policy_changed(self) -> str:
        """Announced (the router's name) whenever a router's policy is stored."""
        return f"{self.prefix}:router:policy-changed"

    @property
    def length_predictor_meta(self) -> str:
        """Its version and how it was trained and evaluated (JSON)."""
        return f"{self.prefix}:router:length-predictor:meta"


class ControlPlaneRegistry(Protocol):
    """What the router asks the control plane: whose key, whose trajectory (job ids as text;
    None: unknown). :class:`Registry` reads Redis; the embedded mode reads its database."""

    async def job_of_key(self, raw_key: str) -> str | None: ...

    async def job_of_trajectory(self, trajectory_id: str) -> str | None: ...


def hash_key(raw_key: str) -> str:
    """The same hash the control plane stores (``apps.jobs.authentication.hash_key``)."""
    return hashlib.sha256(raw_key.encode("utf-8")).hexdigest()


class Registry:
    """Key → job and trajectory → job lookups with the caches described above."""

    def __init__(self, client: aioredis.Redis, names: RegistryNames) -> None:
        self.client = client
        self.names = names
        self._keys: dict[str, tuple[str, float]] = {}
        self._trajectories: dict[str, str] = {}
        self._lookups: dict[tuple[str, str], asyncio.Future[str | None]] = {}
        self._listening = False
        self._listener: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def close(self) -> None:
        await cancel_and_wait(self._listener)

    async def _listen(self) -> None:
        while True:
            pubsub = self.client.pubsub()
            try:
                await pubsub.subscribe(self.names.auth_changed)
                self._keys.clear()
                self._listening = True
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._keys.clear()
            except (RedisError, OSError) as exc:
                log.warning("auth-changed subscription lost (%s); keys uncached until back", exc)
            finally:
                self._listening = False
                self._keys.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()
            await asyncio.sleep(0.5)

    async def job_of_key(self, raw_key: str) -> str | None:
        digest = hash_key(raw_key)
        cached = self._keys.get(digest)
        now = time.monotonic()
        if cached is not None and now - cached[1] < KEY_CACHE_TTL_S:
            return cached[0]
        listening = self._listening
        job = await self._hget(self.names.keys, digest)
        if job is not None and listening and self._listening:
            self._keys[digest] = (job, now)
        return job

    async def job_of_trajectory(self, trajectory_id: str) -> str | None:
        job = self._trajectories.get(trajectory_id)
        if job is not None:
            return job
        job = await self._hget(self.names.trajectories, trajectory_id)
        if job is not None:
            if len(self._trajectories) >= TRAJECTORY_CACHE_MAX:
                self._trajectories.clear()  # crude but bounded; active ones refill it
            self._trajectories[trajectory_id] = job
        return job

    async def _hget(self, name: str, field: str) -> str | None:
        """One Redis read per (hash, field) at a time: concurrent misses of the same key (a
        burst of a new job's first requests) share it instead of each taking a connection."""
        pending = self._lookups.get((name, field))
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._lookups[name, field] = future
        try:
            value = await self.client.hget(name, field)
            job = (
                None
                if value is None
                else value.decode()
                if isinstance(value, bytes)
                else str(value)
            )
            future.set_result(job)
            return job
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody shares it
            raise
        finally:
            del self._lookups[name, field]

    # The control plane's side of the contract, also what tests and the demo use to register.
    async def register_key(self, raw_key: str, job_id: str) -> None:
        await self.client.hset(self.names.keys, hash_key(raw_key), job_id)

    async def register_trajectory(self, trajectory_id: str, job_id: str) -> None:
        await self.client.hset(self.names.trajectories, trajectory_id, job_id)


class StatePublisher:
    """Appends trajectory state to the state stream off the request path: ``publish`` queues,
    a task flushes ``interval_s`` after the first queued entry (at once at ``batch`` entries) in
    one pipelined round trip, and sleeps while nothing is queued (no wake-ups on an idle router).
    Redis being away costs state updates (logged, counted), never a request."""

    def __init__(
        self,
        client: aioredis.Redis | None,
        names: RegistryNames,
        *,
        interval_s: float = 0.05,
        batch: int = 512,
    ) -> None:
        self.client = client
        self.stream = names.trajectory_state
        self.interval_s = interval_s
        self.batch = batch
        self._queue: list[Mapping[str, Any]] = []
        self._queued = asyncio.Event()  # the queue is not empty
        self._full = asyncio.Event()  # it holds ``batch`` entries
        self._task: asyncio.Task[None] | None = None
        self.published = 0
        self.dropped = 0

    def publish(self, state: Mapping[str, Any]) -> None:
        if self.client is None:
            return
        queue = self._queue
        queue.append(state)
        if len(queue) == 1:
            self._queued.set()
        if len(queue) >= self.batch:
            self._full.set()

    async def start(self) -> None:
        if self.client is not None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await self._queued.wait()
            if len(self._queue) < self.batch:  # gather more for the same round trip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self.interval_s)
            self._queued.clear()
            self._full.clear()
            await self.flush()

    async def flush(self) -> None:
        if not self._queue or self.client is None:
            return
        entries, self._queue = self._queue, []
        try:
            async with self.client.pipeline(transaction=False) as pipe:
                for state in entries:
                    pipe.xadd(
                        self.stream,
                        {"state": json.dumps(state, separators=(",", ":"))},
                        maxlen=STATE_STREAM_MAXLEN,
                        approximate=True,
                    )
                await pipe.execute()
            self.published += len(entries)
        except (RedisError, OSError) as exc:
            self.dropped += len(entries)
            log.warning("trajectory state not published (%d entries): %s", len(entries), exc)

    async def close(self) -> None:
        await cancel_and_wait(self._task)
        await self.flush()
