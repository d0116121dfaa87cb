"""Failure handling with real processes: nothing submitted is lost.

The scheduler is ``manage.py run_scheduler`` and the agents are ``python -m workers.agents.cpu``,
each a real subprocess on Redis (db 15 of LOOM_TEST_REDIS_URL) and on this test's PostgreSQL
database (``transaction=True``: the rows are committed, so the subprocesses see them). The tests
SIGKILL them mid-run and check what failure handling promises:

- the scheduler killed and restarted: every action still ends, and none runs twice (each action
  appends a token to a file; every token is there exactly once);
- an agent killed mid-action: an idempotent tool's action is retried on another node, and once
  its attempts are spent it fails with reason ``agent_lost``; a non-idempotent one runs at most
  once: its node's silence is no proof that it stopped, so it is not run elsewhere and ends
  ``agent_lost`` at its deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from apps.actions.models import TERMINAL_STATUSES, Action
from apps.actions.services import ActionSpec, action_submit_batch
from apps.core.demand import parse_demand
from tests.apps.actions.cluster import Cluster
from tests.factories import JobFactory, TrajectoryFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _submit(pool: str, commands: list[str], job: Any = None, **spec: Any) -> list[int]:
    from apps.resources.models import ResourcePool

    job = job or JobFactory.create()
    pool_id = ResourcePool.objects.get(name=pool).pk
    demand = parse_demand({"cpu": 1})
    specs = [ActionSpec(demand=demand, pool_id=pool_id, command=c, **spec) for c in commands]
    return [s.action.pk for s in action_submit_batch(job=job, specs=specs)]


def _wait(condition: Callable[[], bool], timeout_s: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in {timeout_s} s\n{cluster.logs()}")
        time.sleep(0.05)


def _statuses(ids: list[int]) -> dict[int, str]:
    return dict(Action.objects.filter(pk__in=ids).values_list("pk", "status"))


def test_scheduler_killed_mid_run_loses_nothing_and_runs_nothing_twice(cluster: Cluster) -> None:
    node = f"{cluster.pool}-n1"
    cluster.start_scheduler()
    cluster.start_agent(node, "0,1")
    # Actions are sandboxed: the one place they share that outlives them is their trajectory's
    # working directory on the node, so every token goes to runs.log there.
    trajectory = TrajectoryFactory.create()
    commands = [f"sleep 0.3; echo tok-{i} >> runs.log" for i in range(16)]
    submit = {"job": trajectory.job, "trajectory_id": trajectory.pk}

    def tokens() -> list[str]:
        return [t for f in (cluster.work / node).rglob("runs.log") for t in f.read_text().split()]

    ids = _submit(cluster.pool, commands[:8], **submit)
    # Mid-run: some ended, some scheduled or running, some still queued.
    _wait(lambda: len(tokens()) >= 2, 30, "2 ended", cluster)
    cluster.kill("scheduler")
    ids += _submit(cluster.pool, commands[8:], **submit)  # announced while no scheduler reads
    time.sleep(0.7)  # the agent finishes what it holds; its results wait in the stream
    cluster.start_scheduler()

    def all_ended() -> bool:
        return all(s in TERMINAL_STATUSES for s in _statuses(ids).values())

    _wait(all_ended, 60, "every action ended", cluster)
    assert set(_statuses(ids).values()) == {"succeeded"}, cluster.logs()
    assert sorted(tokens()) == sorted(f"tok-{i}" for i in range(16)), "ran twice or never"


def _start_agents(cluster: Cluster, nodes: list[str]) -> None:
    for node in nodes:
        cluster.start_agent(node, "0")

    def registered() -> bool:
        from apps.resources.models import Node

        return Node.objects.filter(name__in=nodes, status="online").count() == len(nodes)

    _wait(registered, 30, "agents registered", cluster)


def test_killed_agent_is_retried_elsewhere_then_fails_agent_lost(cluster: Cluster) -> None:
    from apps.resources.models import ResourcePool, Tool

    nodes = [f"{cluster.pool}-a", f"{cluster.pool}-b"]
    cluster.start_scheduler(max_attempts=2, heartbeat_timeout=1.5)
    _start_agents(cluster, nodes)
    pool = ResourcePool.objects.get(name=cluster.pool)
    tool = Tool.objects.create(name="retryable", pool=pool, idempotent=True)
    [action_id] = _submit(cluster.pool, ["sleep 60.5"], tool_id=tool.pk)
    placements: list[str] = []
    for attempt in (1, 2):

        def placed(attempt: int = attempt) -> bool:
            row = Action.objects.select_related("node").get(pk=action_id)
            return row.status == "running" and row.attempts == attempt and row.node is not None

        _wait(placed, 30, f"attempt {attempt} running", cluster)
        row = Action.objects.select_related("node").get(pk=action_id)
        assert row.node is not None
        placements.append(row.node.name)
        cluster.kill(row.node.name)  # SIGKILL the agent running it, mid-action
    assert placements[0] != placements[1], "the retry must go to another node"
    _wait(lambda: _statuses([action_id])[action_id] == "failed", 30, "failed", cluster)
    row = Action.objects.get(pk=action_id)
    assert row.attempts == 2
    assert row.error_reason.startswith("agent_lost"), row.error_reason


def test_killed_agent_never_runs_a_non_idempotent_action_twice(cluster: Cluster) -> None:
    nodes = [f"{cluster.pool}-a", f"{cluster.pool}-b"]
    cluster.start_scheduler(max_attempts=3, heartbeat_timeout=1.5, result_grace=1.0)
    _start_agents(cluster, nodes)
    [action_id] = _submit(cluster.pool, ["sleep 60.5"], timeout_s=4.0)

    def running() -> bool:
        row = Action.objects.get(pk=action_id)
        return row.status == "running" and row.node_id is not None

    _wait(running, 30, "running", cluster)
    row = Action.objects.select_related("node").get(pk=action_id)
    assert row.node is not None
    cluster.kill(row.node.name)
    _wait(lambda: _statuses([action_id])[action_id] == "failed", 30, "failed", cluster)
    row = Action.objects.get(pk=action_id)
    assert row.attempts == 1, "a non-idempotent action was run again after its node fell silent"
    assert row.error_reason.startswith("agent_lost"), row.error_reason
    assert "not idempotent" in row.error_reason
