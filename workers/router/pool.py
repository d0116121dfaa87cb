"""The LLM workers behind the router: health, drain, in-flight requests, abort fan-out.

A worker is healthy while its ``/health`` answers; ``unhealthy_after`` failed checks in a row (or
a connection refused on the request path) declare it dead: no new request goes to it, and every
request in flight on it is cut (its upstream connection closed), so the client gets a clear,
retryable error instead of waiting on a worker that will never answer. A dead worker that answers
again comes back. A drained worker takes no new requests and finishes what it has.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from workers.cancelling import cancel_all_and_wait
from workers.router.upstream import Upstream, UpstreamLost, UpstreamResponse
from workers.router.worker_metrics import EngineMetrics, engine_metrics

log = logging.getLogger("loom.router")

_ABORT_HEADERS = ((b"content-type", b"application/json"),)


@dataclass(eq=False)
class InFlight:
    """One request forwarded to a worker and not finished."""

    rid: str
    trajectory_id: str
    job_id: str
    worker: LLMWorker
    response: UpstreamResponse | None = None
    lost_reason: str | None = None

    def cut(self, reason: str) -> None:
        """End it from the router's side (worker dead, client gone, aborted)."""
        if self.lost_reason is None:
            self.lost_reason = reason
        if self.response is not None:
            self.response.abort()


@dataclass(eq=False)
class LLMWorker:
    name: str
    url: str
    upstream: Upstream
    index: int = 0
    healthy: bool = True
    draining: bool = False
    failures: int = 0
    deaths: int = 0  # how often it was declared dead: a health check older than that is stale
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    trajectories: set[str] = field(default_factory=set)
    requests_total: int = 0
    metrics: EngineMetrics | None = None  # the engine's own load (None: not reported)
    metrics_at: float | None = None  # wall-clock time of that reading

    @property
    def available(self) -> bool:
        return self.healthy and not self.draining

    @property
    def load(self) -> int:
        return len(self.in_flight)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "url": self.url,
            "healthy": self.healthy,
            "draining": self.draining,
            "in_flight": len(self.in_flight),
            "trajectories": len(self.trajectories),
            "requests_total": self.requests_total,
            "metrics": None if self.metrics is None else self.metrics.as_dict(),
            "metrics_at": self.metrics_at,
        }


class WorkerPool:
    def __init__(
        self,
        urls: Sequence[str],
        *,
        health_interval_s: float = 1.0,
        health_timeout_s: float = 2.0,
        unhealthy_after: int = 2,
        metrics_interval_s: float = 1.0,
        on_metrics: Callable[[list[LLMWorker]], None] | None = None,
    ) -> None:
        if not urls:
            raise ValueError("the router needs at least one worker URL")
        self.workers = [
            LLMWorker(name=f"w{i}", url=url.rstrip("/"), upstream=Upstream(url), index=i)
            for i, url in enumerate(urls)
        ]
        self.by_name = {w.name: w for w in self.workers}
        self.health_interval_s = health_interval_s
        self.health_timeout_s = health_timeout_s
        self.unhealthy_after = unhealthy_after
        self.metrics_interval_s = metrics_interval_s
        self.on_metrics = on_metrics
        self.requests: dict[str, InFlight] = {}
        self._task: asyncio.Task[None] | None = None
        self._metrics_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[object]] = set()

    def available(self) -> list[LLMWorker]:
        return [w for w in self.workers if w.available]

    # ------------------------------------------------------------------ in-flight bookkeeping
    def begin(self, rid: str, trajectory_id: str, job_id: str, worker: LLMWorker) -> InFlight:
        flight = InFlight(rid, trajectory_id, job_id, worker)
        self.requests[rid] = flight
        worker.in_flight[rid] = flight
        worker.requests_total += 1
        return flight

    def finish(self, flight: InFlight) -> None:
        self.requests.pop(flight.rid, None)
        flight.worker.in_flight.pop(flight.rid, None)

    # ------------------------------------------------------------------ abort
    def abort(self, flight: InFlight, reason: str, *, cut: bool) -> None:
        """Abort on the worker (``/abort_request``, fire and forget). The worker then ends the
        response itself (finish reason ``abort``); ``cut`` also closes the connection now, for a
        client that is gone and reads nothing."""
        self.spawn(self._abort_on_worker(flight.worker, flight.rid))
        if cut:
            flight.cut(reason)

    async def _abort_on_worker(self, worker: LLMWorker, rid: str) -> None:
        body = b'{"rid":"' + rid.encode() + b'","abort_all":false}'
        with contextlib.suppress(UpstreamLost, OSError, TimeoutError):
            response = await worker.upstream.request("POST", "/abort_request", body, _ABORT_HEADERS)
            await response.read()

    def spawn(self, coroutine: object) -> None:
        task = asyncio.ensure_future(coroutine)  # type: ignore[call-overload]
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ------------------------------------------------------------------ health
    def mark_dead(self, worker: LLMWorker, reason: str) -> None:
        if worker.healthy:
            log.warning("worker %s (%s) declared dead: %s", worker.name, worker.url, reason)
        worker.healthy = False
        worker.deaths += 1
        for flight in list(worker.in_flight.values()):
            flight.cut(f"worker {worker.name} was lost: {reason}")

    async def check(self, worker: LLMWorker) -> bool:
        """One ``/health`` check. A success only revives a worker that was not declared dead
        while the check was on its way: an answer sent before the death proves nothing after."""
        deaths = worker.deaths
        try:
            response = await asyncio.wait_for(
                worker.upstream.request("GET", "/health"), self.health_timeout_s
            )
            await asyncio.wait_for(response.read(), self.health_timeout_s)
            ok = response.status == 200
        except (UpstreamLost, OSError, TimeoutError):
            ok = False
        if ok and worker.deaths != deaths:
            return False
        if ok:
            if not worker.healthy:
                log.info("worker %s is back", worker.name)
            worker.failures = 0
            worker.healthy = True
        else:
            worker.failures += 1
            if worker.failures >= self.unhealthy_after:
                self.mark_dead(worker, f"{worker.failures} health checks failed")
        return ok

    async def _health_loop(self) -> None:
        while True:
            await asyncio.gather(*(self.check(w) for w in self.workers))
            await asyncio.sleep(self.health_interval_s)

    # ------------------------------------------------------------------ engine metrics
    async def read_metrics(self, worker: LLMWorker) -> None:
        """The worker's ``/metrics`` (off the request path); an engine that serves none, or a
        worker that does not answer, leaves its reading None rather than a stale one."""
        metrics = None
        try:
            response = await asyncio.wait_for(
                worker.upstream.request("GET", "/metrics"), self.health_timeout_s
            )
            text = await asyncio.wait_for(response.read(), self.health_timeout_s)
            if response.status == 200:
                metrics = engine_metrics(text.decode("utf-8", "replace"))
        except (UpstreamLost, OSError, TimeoutError):
            pass
        worker.metrics = metrics
        worker.metrics_at = time.time() if metrics is not None else None

    async def _metrics_loop(self) -> None:
        while True:
            await asyncio.gather(*(self.read_metrics(w) for w in self.workers))
            if self.on_metrics is not None:
                self.on_metrics(self.workers)
            await asyncio.sleep(self.metrics_interval_s)

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._health_loop())
        self._metrics_task = loop.create_task(self._metrics_loop())

    async def close(self) -> None:
        loops = [task for task in (self._task, self._metrics_task) if task is not None]
        await cancel_all_and_wait([*loops, *self._background])
        for worker in self.workers:
            await worker.upstream.close()
