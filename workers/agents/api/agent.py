"""The API agent: makes the HTTP call an ``api`` dispatch describes, over httpx.

Concurrency and period-quota limits are the scheduler's to enforce (arl-tangram §5.1, basic
resource manager): this agent just calls. A 429 from the peer therefore means the quota model was
wrong or shared with someone else, and is reported as ``failed``/``rate_limited`` so it shows up
instead of being retried silently here.
"""

from __future__ import annotations

import time

import httpx

from workers.agents.common.agent import AgentBase, AgentSettings
from workers.transport.base import Transport
from workers.transport.messages import (
    REASON_HTTP_ERROR,
    REASON_INFRA_ERROR,
    REASON_OUTPUT_TRUNCATED,
    REASON_RATE_LIMITED,
    REASON_TIMEOUT,
    ActionResult,
    Dispatch,
    NodeRegister,
    ResultStatus,
)
from workers.transport.streams import StreamNames


def response_status(status_code: int, truncated: bool) -> tuple[ResultStatus, str | None]:
    """Status and reason for an HTTP response."""
    if status_code == 429:
        return "failed", REASON_RATE_LIMITED
    if status_code >= 400:
        return "failed", REASON_HTTP_ERROR
    if truncated:
        return "succeeded", REASON_OUTPUT_TRUNCATED
    return "succeeded", None


class ApiAgent(AgentBase):
    """Runs ``api`` dispatches with one pooled ``httpx.AsyncClient``."""

    backend_name = "httpx"

    def __init__(
        self,
        *,
        transport: Transport,
        node_id: str,
        pool: str,
        max_connections: int = 256,
        streams: StreamNames | None = None,
        agent_id: str | None = None,
        settings: AgentSettings | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(
            transport=transport,
            node_id=node_id,
            pool=pool,
            streams=streams,
            agent_id=agent_id,
            settings=settings,
        )
        self.max_connections = max_connections
        self.client = client or httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=False,
        )

    def registration(self) -> NodeRegister:
        return NodeRegister(
            node_id=self.node_id,
            pool=self.pool,
            agent_id=self.agent_id,
            kind="api",
            backend=self.backend_name,
            concurrency=self.max_connections,
            dispatch_stream=self.dispatch_stream,
            started_at=self.started_at,
        )

    def _result(self, dispatch: Dispatch, **fields: object) -> ActionResult:
        return ActionResult(
            action_id=dispatch.action_id,
            attempt=dispatch.attempt,
            node_id=self.node_id,
            trajectory_id=dispatch.trajectory_id,
            **fields,  # type: ignore[arg-type]
        )

    async def execute(self, dispatch: Dispatch) -> ActionResult:
        started = time.time()
        spec = dispatch.api
        if dispatch.kind != "api" or spec is None:
            return self._result(
                dispatch,
                status="failed",
                reason=REASON_INFRA_ERROR,
                output=f"an api agent cannot run a {dispatch.kind!r} action",
                started_at=started,
                finished_at=started,
            )
        timeout = min(spec.timeout_s, dispatch.timeout_s)
        try:
            async with self.client.stream(
                spec.method,
                spec.url,
                headers={**spec.headers, "X-Loom-Action": dispatch.key},
                json=spec.json_body,
                timeout=timeout,
            ) as response:
                body = bytearray()
                truncated = False
                async for chunk in response.aiter_bytes():
                    room = dispatch.output_cap_bytes - len(body)
                    if len(chunk) > room:
                        body += chunk[: max(room, 0)]
                        truncated = True
                        break
                    body += chunk
        except httpx.TimeoutException as exc:
            return self._result(
                dispatch,
                status="timed_out",
                reason=REASON_TIMEOUT,
                output=f"{type(exc).__name__}: {exc}",
                started_at=started,
                finished_at=time.time(),
            )
        except httpx.HTTPError as exc:
            return self._result(
                dispatch,
                status="failed",
                reason=REASON_INFRA_ERROR,
                output=f"{type(exc).__name__}: {exc}",
                started_at=started,
                finished_at=time.time(),
            )
        status, reason = response_status(response.status_code, truncated)
        return self._result(
            dispatch,
            status=status,
            reason=reason,
            http_status=response.status_code,
            output=bytes(body).decode("utf-8", errors="replace"),
            output_truncated=truncated,
            started_at=started,
            finished_at=time.time(),
        )

    async def close_backend(self) -> None:
        await self.client.aclose()
