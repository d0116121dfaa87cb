"""An agent SIGKILLed mid-action: a second agent for the node reclaims its pending dispatches
after the idle time, kills what the dead one left running, re-runs the idempotent action and
reports the other as ``agent_lost``."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workers.agents.conftest import (
    REDIS_URL,
    SchedulerStandIn,
    leftover_processes,
    wait_until,
)
from workers.agents.common.agent import AgentSettings
from workers.agents.cpu import CpuAgent, LocalBackend
from workers.transport import (
    AGENT_GROUP,
    Dispatch,
    NodeRegister,
    RedisStreamsTransport,
    StreamNames,
)

REPO_ROOT = Path(__file__).resolve().parents[3]
NODE = f"failover-{os.getpid()}"


@pytest.mark.redis
async def test_killed_agent_work_is_reclaimed(
    redis_transport: RedisStreamsTransport, names: StreamNames, tmp_path: Path
) -> None:
    scheduler = SchedulerStandIn(redis_transport, names, "pool-f")
    await scheduler.start()
    doomed = subprocess.Popen(
        [
            sys.executable, "-m", "workers.agents.cpu",
            "--redis-url", REDIS_URL, "--pool", "pool-f", "--node-id", NODE,
            "--stream-prefix", names.prefix, "--backend", "local",
            "--work-root", str(tmp_path), "--heartbeat-interval", "0.2",
            "--reclaim-idle-ms", "600000", "--log-level", "WARNING",
        ],
        cwd=REPO_ROOT,
    )  # fmt: skip
    try:
        [register] = await scheduler.wait_for(NodeRegister, timeout_s=30)
        assert register.node_id == NODE
        cores = (register.cores[0],)
        await scheduler.send(
            NODE,
            Dispatch(action_id="once", attempt=1, job_id="j", kind="cpu", trajectory_id="t1",
                     command="setsid sleep 60 & sleep 61", cores=cores, timeout_s=120),
            Dispatch(action_id="again", attempt=1, job_id="j", kind="cpu", trajectory_id="t2",
                     command="sleep 1.5; echo finished", cores=cores, timeout_s=120,
                     retry_on_redelivery=True),
        )  # fmt: skip
        await wait_until(lambda: len(leftover_processes(f"{NODE}/once:1")) >= 2, 20)
        await wait_until(lambda: bool(leftover_processes(f"{NODE}/again:1")), 20)
    finally:
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.wait(timeout=10)
    # bwrap --die-with-parent: a dead agent's sandboxes end with it, nothing runs unsupervised.
    await wait_until(lambda: leftover_processes(f"{NODE}/") == [], 10)

    pending = await redis_transport.pending(names.dispatch(NODE), AGENT_GROUP)
    assert len(pending) == 2 and {p.delivery_count for p in pending} == {1}

    backend = LocalBackend(node_id=NODE, work_root=tmp_path)
    survivor = CpuAgent(
        transport=redis_transport,
        node_id=NODE,
        pool="pool-f",
        backend=backend,
        streams=names,
        settings=AgentSettings(
            heartbeat_interval_s=0.2, reclaim_interval_s=0.2, reclaim_idle_ms=1000
        ),
    )
    await survivor.start()
    try:
        results = await scheduler.results(2, timeout_s=30)
        once, again = results["once"], results["again"]
        assert (once.status, once.reason) == ("failed", "agent_lost")
        assert (again.status, again.reason, again.output) == ("succeeded", None, "finished\n")
        assert leftover_processes(f"{NODE}/") == []
        for _ in range(50):  # results go out first, the acks right after
            pending = await redis_transport.pending(names.dispatch(NODE), AGENT_GROUP)
            if not pending:
                break
            await asyncio.sleep(0.02)
        assert pending == []
    finally:
        await survivor.stop()
    if backend.cgroups is not None:  # the dead agent's cgroups were removed too
        assert not any(base.exists() for base in backend.cgroups.bases.values())  # type: ignore[attr-defined]
