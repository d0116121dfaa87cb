"""The embedded runtime: Loom's process tree inside one asyncio loop (DESIGN.md "Embedded default").

``make demo`` runs the web app, one scheduler service per CPU, API or GPU pool, a local CPU agent,
an API agent and a GPU agent (CPU stand-in devices without CUDA, PyTorch services) in one process,
connected by the in-process transport. Production runs the same
classes as separate processes over Redis Streams (``manage.py run_scheduler``,
``python -m workers.agents.cpu``, ``python -m workers.agents.api``): configuration, not code,
decides which.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from django.conf import settings

from apps.actions.pool_events import in_process_route_clear, in_process_route_set
from apps.actions.scheduler_store import DjangoActionStore
from apps.resources.models import PoolKind, ResourcePool, Service, ServiceBackend
from workers.agents.api.agent import ApiAgent
from workers.agents.common.agent import AgentBase
from workers.agents.cpu.agent import CpuAgent
from workers.agents.cpu.local import LocalBackend, make_private_root
from workers.agents.cpu.sandbox import Sandbox, open_sandbox, python_runtime_binds
from workers.agents.gpu.agent import GpuAgent
from workers.agents.gpu.cache import ServiceCache
from workers.agents.gpu.checkpoints import create_checkpoint
from workers.agents.gpu.devices import cuda_present, discover_devices
from workers.agents.gpu.torch_backend import TorchService
from workers.cancelling import cancel_all_and_wait
from workers.scheduler import SchedulerService, ServiceConfig
from workers.transport import InProcessTransport, Message, StreamNames, Transport

log = logging.getLogger("loom.runtime")

# Without CUDA the demo's GPU pool runs on CPU stand-in devices (the GPU agent's same code).
GPU_STAND_INS = 2
GPU_STAND_IN_MEMORY_MB = 2000


class EmbeddedRuntime:
    def __init__(
        self,
        *,
        work_root: Path,
        transport: Transport | None = None,
        streams: StreamNames | None = None,
        cores: list[int] | None = None,
        config_overrides: dict[str, Any] | None = None,
        publish_snapshot: Callable[[str, dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.transport = transport or InProcessTransport()
        self.streams = streams or StreamNames()
        self.work_root = work_root
        self.cores = cores
        self.config_overrides = config_overrides or {}
        self.publish_snapshot = publish_snapshot
        self.services: dict[str, SchedulerService] = {}
        self.agents: list[AgentBase] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        # The API's submissions and cancellations reach these schedulers through this runtime.
        in_process_route_set(self._route_pool_event)
        pools = await asyncio.to_thread(
            lambda: list(
                ResourcePool.objects.filter(
                    kind__in=[PoolKind.CPU, PoolKind.API, PoolKind.GPU]
                ).values_list("name", "kind")
            )
        )
        host = socket.gethostname()
        for name, kind in pools:
            node_id = f"{host}-{name}"
            agent: AgentBase
            if kind == PoolKind.CPU:
                backend = LocalBackend(
                    node_id=node_id,
                    work_root=self.work_root / node_id,
                    sandbox=await asyncio.to_thread(self._sandbox),
                )
                agent = CpuAgent(
                    transport=self.transport,
                    node_id=node_id,
                    pool=name,
                    backend=backend,
                    cores=self.cores,
                    streams=self.streams,
                )
            elif kind == PoolKind.GPU:
                agent = GpuAgent(
                    transport=self.transport,
                    node_id=node_id,
                    pool=name,
                    cache=await asyncio.to_thread(self._gpu_cache, name),
                    streams=self.streams,
                )
            else:
                agent = ApiAgent(
                    transport=self.transport, node_id=node_id, pool=name, streams=self.streams
                )
            self.agents.append(agent)
            self._tasks.append(asyncio.create_task(agent.run(), name=f"agent {node_id}"))
            config = ServiceConfig(pool=name, **self.config_overrides)
            service = SchedulerService(
                config=config,
                transport=self.transport,
                store=DjangoActionStore(),
                streams=self.streams,
                publish_snapshot=self.publish_snapshot,
            )
            self.services[name] = service
            self._tasks.append(asyncio.create_task(service.run(self._stop), name=f"pool {name}"))
        for service in self.services.values():
            await service.started.wait()
        log.info("embedded runtime: pools %s", ", ".join(self.services) or "none")

    def _gpu_cache(self, pool: str) -> ServiceCache:
        """The pool's PyTorch services on this machine's devices (``GPU_STAND_INS`` CPU stand-ins
        without CUDA), each checkpoint written on first use where its ``model`` path says."""
        services = {}
        for service in Service.objects.filter(pool__name=pool, backend=ServiceBackend.TORCH):
            path = Path(service.model)
            if not (path / "config.json").exists():
                create_checkpoint(path, service.task)  # type: ignore[arg-type]
            services[service.name] = TorchService(service.name, path, service.task)  # type: ignore[arg-type]
        if cuda_present():
            return ServiceCache(discover_devices(), services)
        return ServiceCache(discover_devices(GPU_STAND_INS, GPU_STAND_IN_MEMORY_MB), services)

    def _sandbox(self) -> Sandbox | None:
        """The local agent's sandbox as the settings describe it (``open_sandbox`` refuses to go
        on without one unless LOOM_INSECURE_UNSANDBOXED_ACTIONS is set)."""
        make_private_root(self.work_root)
        binds = settings.LOOM_SANDBOX_RO_BINDS
        database = settings.DATABASES["default"]
        protected = [Path(settings.BASE_DIR), Path(settings.VAR_DIR), self.work_root]
        if database["ENGINE"].endswith("sqlite3") and str(database["NAME"]).startswith("/"):
            protected.append(Path(database["NAME"]))
        return open_sandbox(
            insecure=settings.LOOM_INSECURE_UNSANDBOXED_ACTIONS,
            user=settings.LOOM_SANDBOX_USER,
            ro_binds=python_runtime_binds() if binds is None else [Path(b) for b in binds],
            protected=protected,
        )

    async def stop(self) -> None:
        self._stop.set()
        for agent in self.agents:
            await agent.stop()
        await cancel_all_and_wait(self._tasks)
        in_process_route_clear(self._route_pool_event)

    def _route_pool_event(self, pool: str, message: Message) -> None:
        self.publish_threadsafe(self.streams.events(pool), message)

    def publish_threadsafe(self, stream: str, message: Message) -> Future[str] | None:
        """Publish from any thread (sync Django views run outside the loop's thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return None
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            loop.create_task(self.transport.publish(stream, message))
            return None
        return asyncio.run_coroutine_threadsafe(self.transport.publish(stream, message), loop)
