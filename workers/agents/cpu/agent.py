"""The CPU agent: registers its cores (with NUMA layout) and memory, runs cpu dispatches."""

from __future__ import annotations

import time
from collections.abc import Sequence

from workers.agents.common.agent import AgentBase, AgentSettings
from workers.agents.common.sysinfo import numa_layout, total_memory_mb, usable_cores
from workers.agents.cpu.backend import ExecOutcome, ExecutionBackend
from workers.transport.base import Transport
from workers.transport.messages import (
    REASON_EXIT_CODE_NONZERO,
    REASON_INFRA_ERROR,
    REASON_OOM,
    REASON_OUTPUT_TRUNCATED,
    REASON_TIMEOUT,
    ActionResult,
    Dispatch,
    NodeRegister,
    ResultStatus,
)
from workers.transport.streams import StreamNames


def outcome_status(outcome: ExecOutcome) -> tuple[ResultStatus, str | None]:
    """Status and reason of an ended execution (first matching rule wins)."""
    if outcome.infra_error is not None:
        return "failed", REASON_INFRA_ERROR
    if outcome.timed_out:
        return "timed_out", REASON_TIMEOUT
    if outcome.oom_killed:
        return "failed", REASON_OOM
    if outcome.exit_code != 0:
        return "failed", REASON_EXIT_CODE_NONZERO
    if outcome.output_truncated:
        return "succeeded", REASON_OUTPUT_TRUNCATED
    return "succeeded", None


class CpuAgent(AgentBase):
    """Runs ``cpu`` dispatches through a backend (local or docker); see AgentBase for the loop."""

    def __init__(
        self,
        *,
        transport: Transport,
        node_id: str,
        pool: str,
        backend: ExecutionBackend,
        cores: Sequence[int] | None = None,
        memory_mb: int | None = None,
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
        self.backend = backend
        self.backend_name = backend.name
        self.cores = tuple(sorted(cores)) if cores else tuple(usable_cores())
        self.numa = numa_layout(self.cores)
        self.memory_mb = memory_mb if memory_mb is not None else total_memory_mb()

    def registration(self) -> NodeRegister:
        return NodeRegister(
            node_id=self.node_id,
            pool=self.pool,
            agent_id=self.agent_id,
            kind="cpu",
            backend=self.backend.name,
            cores=self.cores,
            numa=self.numa,
            memory_mb=self.memory_mb,
            dispatch_stream=self.dispatch_stream,
            started_at=self.started_at,
        )

    async def execute(self, dispatch: Dispatch) -> ActionResult:
        unknown = sorted(set(dispatch.cores) - set(self.cores))
        if dispatch.kind != "cpu" or unknown:
            now = time.time()
            problem = (
                f"cores {unknown} are not on node {self.node_id}"
                if unknown
                else f"a cpu agent cannot run a {dispatch.kind!r} action"
            )
            return ActionResult(
                action_id=dispatch.action_id,
                attempt=dispatch.attempt,
                node_id=self.node_id,
                status="failed",
                reason=REASON_INFRA_ERROR,
                output=problem,
                started_at=now,
                finished_at=now,
                cores=dispatch.cores,
                trajectory_id=dispatch.trajectory_id,
            )
        outcome = await self.backend.run(dispatch)
        status, reason = outcome_status(outcome)
        output = outcome.output.decode("utf-8", errors="replace")
        if outcome.infra_error:
            output = outcome.infra_error
        return ActionResult(
            action_id=dispatch.action_id,
            attempt=dispatch.attempt,
            node_id=self.node_id,
            status=status,
            exit_code=outcome.exit_code,
            output=output,
            output_truncated=outcome.output_truncated,
            reason=reason,
            started_at=outcome.started_at,
            finished_at=outcome.finished_at,
            cores=dispatch.cores,
            trajectory_id=dispatch.trajectory_id,
        )

    async def end_trajectory(self, trajectory_id: str) -> None:
        await self.backend.end_trajectory(trajectory_id)

    async def clean_lost_attempt(self, dispatch: Dispatch) -> None:
        await self.backend.clean_lost_attempt(dispatch)

    async def maintain(self, now: float) -> None:
        await self.backend.sweep_idle(now)

    async def close_backend(self) -> None:
        await self.backend.close()
