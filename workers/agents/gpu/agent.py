"""The GPU agent: registers its devices and services, runs ``gpu`` dispatches through the cache.

Like the cpu agent registers cores, it registers its GPUs (count, per-device memory, NVLink
groups: arl-tangram §5.3 "Pool") plus the services it hosts and which of them is resident on
which chunk, so the scheduler's ``GpuTopology`` prefers chunks that already hold a service. A
dispatch names the chunk (``gpus``), the ``service`` and its ``request``; the cache restores the
service there if it is not resident (evicting LRU), runs the request and the result carries the
output, the timings (queue, restore, execute) and the cache events. Heartbeats carry the cache
too, so the scheduler's view of it follows evictions it did not predict.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from workers.agents.common.agent import AgentBase, AgentSettings
from workers.agents.gpu.backend import ServiceError
from workers.agents.gpu.cache import CacheError, LoadFailed, ServiceCache
from workers.agents.gpu.devices import nvlink_groups
from workers.transport.base import Transport
from workers.transport.messages import (
    REASON_BAD_REQUEST,
    REASON_INFRA_ERROR,
    REASON_LOAD_FAILED,
    REASON_OUTPUT_TRUNCATED,
    REASON_TIMEOUT,
    ActionResult,
    Dispatch,
    Heartbeat,
    NodeRegister,
)
from workers.transport.streams import StreamNames


class GpuAgent(AgentBase):
    """Runs ``gpu`` dispatches on the allocated chunk through a ``ServiceCache``."""

    def __init__(
        self,
        *,
        transport: Transport,
        node_id: str,
        pool: str,
        cache: ServiceCache,
        streams: StreamNames | None = None,
        agent_id: str | None = None,
        settings: AgentSettings | None = None,
    ) -> None:
        super().__init__(
            transport=transport,
            node_id=node_id,
            pool=pool,
            streams=streams,
            agent_id=agent_id,
            settings=settings,
        )
        self.cache = cache
        kinds = sorted({backend.kind for backend in cache.services.values()})
        self.backend_name = "+".join(kinds) or "none"

    async def start(self) -> None:
        """Load the services' host copies first: the registration then says what is ready."""
        if not self.cache.prepared:
            await self.cache.prepare()
        await super().start()

    def services(self) -> dict[str, dict[str, Any]]:
        """Per hosted service: backend, chunk sizes, memory per device at each size (or why it
        did not load)."""
        out: dict[str, dict[str, Any]] = {}
        for name, backend in self.cache.services.items():
            if name in self.cache.failed:
                out[name] = {"kind": backend.kind, "error": self.cache.failed[name]}
                continue
            sizes = [size for size in backend.chunk_sizes() if size <= len(self.cache.devices)]
            out[name] = {
                "kind": backend.kind,
                "sizes": sizes,
                "device_mb": [round(backend.device_mb(size), 3) for size in sizes],
            }
        return out

    def registration(self) -> NodeRegister:
        devices = self.cache.devices
        return NodeRegister(
            node_id=self.node_id,
            pool=self.pool,
            agent_id=self.agent_id,
            kind="gpu",
            backend=self.backend_name,
            dispatch_stream=self.dispatch_stream,
            started_at=self.started_at,
            gpus=tuple(device.index for device in devices),
            gpu_memory_mb=min(device.memory_mb for device in devices),
            nvlink_groups=tuple(nvlink_groups(devices)),
            services=self.services(),
            cache=tuple(self.cache.resident()),
        )

    def heartbeat(self) -> Heartbeat:
        beat = super().heartbeat()
        return Heartbeat(**{**beat.__dict__, "cache": tuple(self.cache.resident())})

    def _result(self, dispatch: Dispatch, started: float, **fields: Any) -> ActionResult:
        return ActionResult(
            action_id=dispatch.action_id,
            attempt=dispatch.attempt,
            node_id=self.node_id,
            started_at=started,
            finished_at=time.time(),
            trajectory_id=dispatch.trajectory_id,
            gpus=dispatch.gpus,
            **fields,
        )

    async def execute(self, dispatch: Dispatch) -> ActionResult:
        started = time.time()
        if dispatch.kind != "gpu" or dispatch.service is None:
            return self._result(
                dispatch, started, status="failed", reason=REASON_INFRA_ERROR,
                output=f"a gpu agent cannot run a {dispatch.kind!r} action",
            )  # fmt: skip
        request = dispatch.request if isinstance(dispatch.request, dict) else {}
        try:
            async with asyncio.timeout(dispatch.timeout_s):
                served = await self.cache.serve(
                    dispatch.service, dispatch.gpus, request, dispatch.priority
                )
        except TimeoutError:
            return self._result(
                dispatch, started, status="timed_out", reason=REASON_TIMEOUT,
                output=f"the request took longer than {dispatch.timeout_s} s",
            )  # fmt: skip
        except LoadFailed as exc:
            return self._result(
                dispatch, started, status="failed", reason=REASON_LOAD_FAILED, output=str(exc)
            )
        except ServiceError as exc:  # the request's input: the caller's to fix
            return self._result(
                dispatch, started, status="failed", reason=REASON_BAD_REQUEST, output=str(exc)
            )
        except CacheError as exc:  # an allocation this node cannot honour: the scheduler's
            return self._result(
                dispatch, started, status="failed", reason=REASON_INFRA_ERROR, output=str(exc)
            )
        output = json.dumps(served.output, separators=(",", ":"))
        truncated = len(output.encode()) > dispatch.output_cap_bytes
        if truncated:
            output = output.encode()[: dispatch.output_cap_bytes].decode("utf-8", "ignore")
        return self._result(
            dispatch, started, status="succeeded",
            reason=REASON_OUTPUT_TRUNCATED if truncated else None,
            output=output, output_truncated=truncated,
            timings=served.timings.to_dict(),
            cache_events=tuple(event.to_dict() for event in served.events),
            score=single_score(served.output),
        )  # fmt: skip

    async def close_backend(self) -> None:
        await self.cache.close()


def single_score(output: Any) -> float | None:
    """The action's score when a reward model scored one sequence (``{"scores": [x]}``); a
    batch's scores stay in the output, where the trainer reads them in order."""
    scores = output.get("scores") if isinstance(output, dict) else None
    if isinstance(scores, list) and len(scores) == 1 and isinstance(scores[0], (int, float)):
        return float(scores[0])
    return None
