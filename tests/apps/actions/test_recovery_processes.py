"""Failure handling with real processes (issue 6 "Failure handling — nothing submitted is lost").

The scheduler is ``manage.py run_scheduler`` and the agents are ``python -m workers.agents.cpu``,
each a real subprocess on Redis (db 15 of LOOM_TEST_REDIS_URL) and on this test's PostgreSQL
database (``transaction=True``: the rows are committed, so the subprocesses see them). The tests
SIGKILL them mid-run and check what the issue promises:

- the scheduler killed and restarted: every action still ends, and none runs twice (each action
  appends a token to a file; every token is there exactly once);
- an agent killed mid-action: the action is retried on another node, and once its attempts are
  spent it fails with reason ``agent_lost``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from apps.actions.demand import parse_demand
from apps.actions.models import TERMINAL_STATUSES, Action
from apps.actions.services import ActionSpec, action_submit_batch
from tests.apps.actions.cluster import Cluster
from tests.factories import JobFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def _submit(pool: str, commands: list[str], **spec: Any) -> list[int]:
    from apps.resources.models import ResourcePool

    job = JobFactory.create()
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
    runs = cluster.work / "runs.log"
    cluster.start_scheduler()
    cluster.start_agent(node, "0,1")
    commands = [f"sleep 0.3; echo tok-{i} >> {runs}" for i in range(16)]
    ids = _submit(cluster.pool, commands[:8])
    # Mid-run: some ended, some scheduled or running, some still queued.
    _wait(lambda: runs.exists() and len(runs.read_text().split()) >= 2, 30, "2 ended", cluster)
    cluster.kill("scheduler")
    ids += _submit(cluster.pool, commands[8:])  # announced while no scheduler reads
    time.sleep(0.7)  # the agent finishes what it holds; its results wait in the stream
    cluster.start_scheduler()

    def all_ended() -> bool:
        return all(s in TERMINAL_STATUSES for s in _statuses(ids).values())

    _wait(all_ended, 60, "every action ended", cluster)
    assert set(_statuses(ids).values()) == {"succeeded"}, cluster.logs()
    tokens = runs.read_text().split()
    assert sorted(tokens) == sorted(f"tok-{i}" for i in range(16)), "an action ran twice or never"


def test_killed_agent_is_retried_elsewhere_then_fails_agent_lost(cluster: Cluster) -> None:
    nodes = [f"{cluster.pool}-a", f"{cluster.pool}-b"]
    cluster.start_scheduler(max_attempts=2, heartbeat_timeout=1.5)
    for node in nodes:
        cluster.start_agent(node, "0")

    def registered() -> bool:
        from apps.resources.models import Node

        return Node.objects.filter(name__in=nodes, status="online").count() == 2

    _wait(registered, 30, "both agents registered", cluster)
    [action_id] = _submit(cluster.pool, ["sleep 60.5"])
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
