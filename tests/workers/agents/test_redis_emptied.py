"""An agent whose Redis comes back empty (restarted without persistence, as deploy/ runs it):
its consumer group is created again, and an attempt that already ended here is answered with its
result again instead of silently (its first result may have gone with Redis) — and not re-run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.workers.agents.conftest import (
    SchedulerStandIn,
    bounded,
    cpu_dispatch,
    redis_transport_for,
)
from workers.agents.common.agent import AgentSettings
from workers.agents.cpu import CpuAgent, LocalBackend
from workers.transport import ActionResult, StreamNames

FAST = AgentSettings(heartbeat_interval_s=0.1, reclaim_interval_s=0.2, read_block_ms=100)


@pytest.mark.redis
async def test_agent_reads_again_and_resends_an_ended_attempt(
    names: StreamNames, tmp_path: Path
) -> None:
    async with redis_transport_for(names) as transport:
        scheduler = SchedulerStandIn(transport, names, "cpu-pool")
        await scheduler.start()
        agent = CpuAgent(
            transport=transport,
            node_id="node-emptied",
            pool="cpu-pool",
            backend=LocalBackend(node_id="node-emptied", work_root=tmp_path, cgroups=None),
            streams=names,
            settings=FAST,
        )
        await agent.start()
        try:
            once = cpu_dispatch("a", "echo ran >> runs; echo done")
            await scheduler.send("node-emptied", once)
            first = (await scheduler.results(1))["a"]
            assert first.status == "succeeded"

            # Redis restarted empty: every stream and group is gone; a rebuilt scheduler
            # re-dispatches what it has as running (same attempt) and dispatches new work.
            await transport.delete([names.dispatch("node-emptied"), names.events("cpu-pool")])
            scheduler.seen.clear()
            await scheduler.start()
            await scheduler.send("node-emptied", once, cpu_dispatch("b", "echo b"))
            found = await scheduler.wait_for(ActionResult, 2, timeout_s=30)
            by_action = {r.action_id: r for r in found}
            assert by_action["a"] == first  # the same result, sent again
            assert by_action["b"].status == "succeeded"
            runs = (tmp_path / "t" / "runs").read_text().splitlines()
            assert runs == ["ran"]  # answered, not run again
        finally:
            await bounded(agent.stop(), "agent.stop()")
