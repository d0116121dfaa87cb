"""Fixtures for the dashboard: people in each role, a CPU pool with a node, a job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone


@pytest.fixture(autouse=True)
def fresh_live_caches() -> None:
    """Live job counts cache ended-action counts for 10 s, the Rollouts page its ended
    trajectories' counts; ids repeat across tests."""
    from apps.dashboard import selectors_rollouts
    from apps.dashboard.live import snapshots

    snapshots._terminal_counts.clear()
    selectors_rollouts._ended_counts.clear()


def _user_in_role(username: str, group_name: str | None) -> Any:
    from apps.dashboard.roles import roles_ensure
    from tests.factories import UserFactory

    user: Any = UserFactory(username=username)
    if group_name is not None:
        user.groups.add(roles_ensure()[group_name])
    return type(user).objects.get(pk=user.pk)  # fresh: no cached permissions


@pytest.fixture
def operator_user(db: Any) -> Any:
    from apps.dashboard.roles import OPERATOR_GROUP

    return _user_in_role("watcher", OPERATOR_GROUP)


@pytest.fixture
def admin_user(db: Any) -> Any:
    from apps.dashboard.roles import ADMIN_GROUP

    return _user_in_role("tuner", ADMIN_GROUP)


@pytest.fixture
def roleless_user(db: Any) -> Any:
    return _user_in_role("nobody", None)


@pytest.fixture
def operator_client(operator_user: Any) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(operator_user)
    return client


@pytest.fixture
def admin_client(admin_user: Any) -> Any:
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(admin_user)
    return client


@pytest.fixture
def cpu_pool(db: Any) -> Any:
    from tests.factories import PoolFactory

    return PoolFactory(name="cpu")


@pytest.fixture
def cpu_node(cpu_pool: Any) -> Any:
    from tests.factories import NodeFactory

    return NodeFactory(name="node-a", pool=cpu_pool, cores=4, last_heartbeat_at=timezone.now())


@pytest.fixture
def job(db: Any) -> Any:
    from tests.factories import JobFactory

    return JobFactory(name="trainer")


def finished_action(job: Any, pool: Any, *, act_s: float, exec_s: float = 0.5, **extra: Any) -> Any:
    """A succeeded action that completed just now after ``act_s`` seconds."""
    from apps.actions.models import ActionStatus
    from tests.factories import ActionFactory

    finished = timezone.now()
    submitted = finished - timedelta(seconds=act_s)
    return ActionFactory(
        job=job,
        pool=pool,
        status=ActionStatus.SUCCEEDED,
        submitted_at=submitted,
        scheduled_at=finished - timedelta(seconds=exec_s),
        started_at=finished - timedelta(seconds=exec_s),
        finished_at=finished,
        **extra,
    )


def running_action(job: Any, pool: Any, node: Any, cores: list[int]) -> Any:
    from apps.actions.models import ActionStatus
    from tests.factories import ActionFactory

    now = timezone.now()
    return ActionFactory(
        job=job,
        pool=pool,
        node=node,
        status=ActionStatus.RUNNING,
        allocation={"cores": cores, "gpus": [], "units": len(cores)},
        submitted_at=now - timedelta(seconds=2),
        scheduled_at=now - timedelta(seconds=1),
        started_at=now - timedelta(seconds=1),
    )
