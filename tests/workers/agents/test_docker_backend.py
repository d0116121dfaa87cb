"""Docker backend against a real dockerd started by the test (allocate-on-execution,
arl-tangram §5.2): a container per trajectory, ``docker update`` of its cpuset before each exec,
timeouts and fork-and-leave commands leave nothing behind, containers removed at the end."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.workers.agents.conftest import (
    SchedulerStandIn,
    cpu_dispatch,
    leftover_processes,
    wait_until,
)
from workers.agents.common.agent import AgentSettings
from workers.agents.cpu import CpuAgent, DockerBackend
from workers.testing.dockerd import DockerDaemon
from workers.transport import Dispatch, RedisStreamsTransport, StreamNames, TrajectoryEnd

pytestmark = pytest.mark.docker

CORES = tuple(sorted(os.sched_getaffinity(0)))


def _dispatch(action: str, command: str, **fields: Any) -> Dispatch:
    return cpu_dispatch(action, command, **{"timeout_s": 20.0, **fields})


def _node_containers(daemon: DockerDaemon, node: str) -> list[str]:
    return daemon.docker("ps", "-aq", "--filter", f"label=loom.node={node}").split()


@pytest.fixture
async def backend(
    dockerd: tuple[DockerDaemon, str], request: pytest.FixtureRequest
) -> AsyncIterator[DockerBackend]:
    daemon, image = dockerd
    node = f"dk-{request.node.name[5:25]}-{os.getpid()}".replace("[", "").replace("]", "")
    docker = DockerBackend(node_id=node, image=image, docker_host=daemon.host, idle_ttl_s=60)
    yield docker
    await docker.close()
    assert _node_containers(daemon, node) == []
    assert docker.work_root is not None and not docker.work_root.exists()  # files gone too


async def test_container_per_trajectory_with_cpuset_updated_before_each_exec(
    backend: DockerBackend, dockerd: tuple[DockerDaemon, str]
) -> None:
    daemon, _ = dockerd
    first = await backend.run(
        _dispatch("a1", "grep Cpus_allowed_list /proc/self/status; echo kept > f; echo {dop}",
                  cores=CORES[-1:], memory_mb=64)
    )  # fmt: skip
    assert first.exit_code == 0, first.output
    assert first.output.decode().split() == ["Cpus_allowed_list:", str(CORES[-1]), "1"]
    second = await backend.run(
        _dispatch("a2", "grep Cpus_allowed_list /proc/self/status; cat f; pwd", cores=CORES)
    )
    expected = f"{CORES[0]}-{CORES[-1]}" if len(CORES) > 1 else str(CORES[0])
    assert second.output.decode().split() == ["Cpus_allowed_list:", expected, "kept", "/work"]
    [container] = _node_containers(daemon, backend.node_id)
    host_config = json.loads(daemon.docker("inspect", container))[0]["HostConfig"]
    assert host_config["Memory"] == 64 * 2**20  # the trajectory's memory, reserved at creation
    assert host_config["CpusetCpus"] == expected  # left where the last exec put it
    assert host_config["NanoCpus"] == len(CORES) * 10**9
    await backend.end_trajectory("t")
    assert _node_containers(daemon, backend.node_id) == []


async def test_timeout_kills_the_exec_tree(
    backend: DockerBackend, dockerd: tuple[DockerDaemon, str]
) -> None:
    daemon, _ = dockerd
    started = time.monotonic()
    outcome = await backend.run(
        _dispatch("slow", "sleep 60 & (sleep 61 &); sleep 62", timeout_s=0.5)
    )
    assert outcome.timed_out
    assert time.monotonic() - started < 10
    assert leftover_processes(f"{backend.node_id}/") == []
    [container] = _node_containers(daemon, backend.node_id)
    top = daemon.docker("top", container).splitlines()[1:]
    assert len(top) == 1 and "sleep 2147483647" in top[0]  # only the container's init


async def test_fork_and_leave_exit_code_and_output_cap(backend: DockerBackend) -> None:
    forky = await backend.run(_dispatch("forky", "sleep 60 & echo started"))
    assert (forky.exit_code, forky.output) == (0, b"started\n")
    assert leftover_processes(f"{backend.node_id}/") == []
    big = await backend.run(
        _dispatch("big", "head -c 100000 /dev/zero | tr '\\0' y; exit 4", output_cap_bytes=64)
    )
    assert (big.exit_code, big.output, big.output_truncated) == (4, b"y" * 64, True)


async def test_idle_containers_are_swept_and_lone_actions_cleaned(
    backend: DockerBackend, dockerd: tuple[DockerDaemon, str]
) -> None:
    daemon, _ = dockerd
    lone = await backend.run(_dispatch("lone", "echo alone", trajectory_id=None))
    assert lone.output == b"alone\n"
    assert _node_containers(daemon, backend.node_id) == []  # no trajectory: removed at once
    await backend.run(_dispatch("w", "true", trajectory_id="idle"))
    assert await backend.sweep_idle(time.time()) == []
    assert await backend.sweep_idle(time.time() + backend.idle_ttl_s + 1) == ["idle"]
    assert _node_containers(daemon, backend.node_id) == []


@pytest.mark.redis
async def test_cpu_agent_with_docker_backend_over_redis(
    dockerd: tuple[DockerDaemon, str],
    redis_transport: RedisStreamsTransport,
    names: StreamNames,
    tmp_path: Path,
) -> None:
    daemon, image = dockerd
    node = f"dk-agent-{os.getpid()}"
    scheduler = SchedulerStandIn(redis_transport, names, "docker-pool")
    await scheduler.start()
    backend = DockerBackend(node_id=node, image=image, docker_host=daemon.host)
    agent = CpuAgent(
        transport=redis_transport,
        node_id=node,
        pool="docker-pool",
        backend=backend,
        streams=names,
        settings=AgentSettings(heartbeat_interval_s=0.2, read_block_ms=100),
    )
    await agent.start()
    try:
        await scheduler.send(node, _dispatch("d1", "echo from-container {dop}", memory_mb=32))
        result = (await scheduler.results(1))["d1"]
        assert (result.status, result.output) == ("succeeded", "from-container 1\n")
        assert len(_node_containers(daemon, node)) == 1
        await scheduler.send(node, TrajectoryEnd(trajectory_id="t"))
        await wait_until(lambda: _node_containers(daemon, node) == [], 15)
    finally:
        await agent.stop()
    assert backend.work_root is not None and not backend.work_root.exists()
