"""The control plane's two links with the LLM router, against the router's own code: the
trajectories it serves (``router_registry``) and its published state persisted to the rows
(``router_state``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis as redis_lib
import redis.asyncio as aioredis

from apps.trajectories.models import Trajectory, TrajectoryStatus
from apps.trajectories.router_registry import router_trajectories_sync
from apps.trajectories.router_state import router_state_drain, router_states_apply
from apps.trajectories.services import trajectory_create, trajectory_update
from tests.factories import JobFactory, TrajectoryFactory
from workers.router.registry import Registry, RegistryNames, StatePublisher
from workers.router.trajectories import TrajectoryState

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


async def _router_job_of(redis_url: str, names: RegistryNames, trajectory_id: int) -> str | None:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return await Registry(client, names).job_of_trajectory(str(trajectory_id))
    finally:
        await client.aclose()


def _seen(redis_url: str, names: RegistryNames, trajectory_id: int) -> str | None:
    return asyncio.run(_router_job_of(redis_url, names, trajectory_id))


async def _publish(redis_url: str, names: RegistryNames, states: list[dict[str, Any]]) -> None:
    """What the router does: its StatePublisher appends snapshots to the state stream."""
    client = aioredis.Redis.from_url(redis_url)
    publisher = StatePublisher(client, names)
    try:
        for state in states:
            publisher.publish(state)
        await publisher.flush()
    finally:
        await client.aclose()


def _snapshot(trajectory: Trajectory, event: str = "step", **fields: Any) -> dict[str, Any]:
    state = TrajectoryState(
        trajectory_id=str(trajectory.pk),
        job_id=str(trajectory.job_id),
        prompt_id=trajectory.prompt_id,
        group_id=trajectory.group_id,
        created_at=time.monotonic(),
    )
    for name, value in fields.items():
        setattr(state, name, value)
    return state.snapshot(event)


def test_created_trajectories_reach_the_router_and_ended_ones_leave(
    router_names: RegistryNames, redis_url: str, django_capture_on_commit_callbacks: Any
) -> None:
    job = JobFactory.create()
    with django_capture_on_commit_callbacks(execute=True):
        live = trajectory_create(job=job, prompt_id="p")
        ending = trajectory_create(job=job, prompt_id="q")
    assert _seen(redis_url, router_names, live.pk) == str(job.pk)
    assert _seen(redis_url, router_names, ending.pk) == str(job.pk)
    with django_capture_on_commit_callbacks(execute=True):
        trajectory_update(trajectory_id=ending.pk, changes={"status": TrajectoryStatus.FINISHED})
    assert _seen(redis_url, router_names, ending.pk) is None  # it generates nothing more
    assert _seen(redis_url, router_names, live.pk) == str(job.pk)


def test_sync_rebuilds_the_registry_from_the_live_rows(
    router_names: RegistryNames, redis_url: str
) -> None:
    live = TrajectoryFactory.create()  # created without the service: never published
    TrajectoryFactory.create(status=TrajectoryStatus.ABORTED)
    assert _seen(redis_url, router_names, live.pk) is None
    assert router_trajectories_sync() == 1
    assert _seen(redis_url, router_names, live.pk) == str(live.job_id)


def test_the_routers_latest_state_lands_on_the_row(
    router_names: RegistryNames, redis_url: str
) -> None:
    trajectory = TrajectoryFactory.create()
    other = TrajectoryFactory.create()
    first = _snapshot(trajectory, status="generating", steps=1, tokens=120, worker="w0")
    latest = _snapshot(
        trajectory, status="tool_call", steps=2, tokens=300, worker="w1", predicted_remaining=900,
        queueing_s=0.5, generation_s=2.0, tool_s=1.0,
    )  # fmt: skip
    asyncio.run(_publish(redis_url, router_names, [first, latest, _snapshot(other, tokens=7)]))
    drained = router_state_drain()
    assert (drained.read, drained.applied, drained.skipped) == (3, 2, 0)
    trajectory.refresh_from_db()
    assert trajectory.status == TrajectoryStatus.TOOL_CALL
    assert (trajectory.steps, trajectory.tokens) == (2, 300)
    assert trajectory.predicted_remaining_tokens == 900
    assert trajectory.llm_worker == "w1"
    assert (trajectory.queueing_s, trajectory.generation_s, trajectory.tool_s) == (0.5, 2.0, 1.0)
    assert trajectory.total_s >= 0.0
    assert router_state_drain().read == 0  # acknowledged: nothing is applied twice


def test_states_that_cannot_apply_are_skipped_and_acknowledged(
    router_names: RegistryNames, redis_url: str
) -> None:
    # ended, with counts and timings its late snapshot does not raise
    ended = TrajectoryFactory.create(status=TrajectoryStatus.FINISHED, tokens=50, total_s=1e6)
    mine = TrajectoryFactory.create(tokens=500)
    theirs = TrajectoryFactory.create()
    foreign = _snapshot(theirs, tokens=600)
    foreign["job"] = str(theirs.job_id + 1000)  # a state naming another job
    went_back = _snapshot(mine, tokens=10)  # counts never go back
    expired = _snapshot(TrajectoryFactory.create(status=TrajectoryStatus.GENERATING), "expired")
    states = [_snapshot(ended, tokens=9), foreign, went_back, expired]
    asyncio.run(_publish(redis_url, router_names, states))
    client = redis_lib.Redis.from_url(redis_url)
    client.xadd(router_names.trajectory_state, {"state": b"not json"})
    client.xadd(router_names.trajectory_state, {"other": b"field"})
    drained = router_state_drain()
    assert drained.read == 6
    assert drained.applied == 1  # only the expired one (its status kept)
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert (mine.tokens, theirs.tokens) == (500, 0)
    assert Trajectory.objects.get(pk=int(expired["trajectory"])).status == "generating"
    assert router_state_drain().read == 0
    client.close()


def test_malformed_values_do_not_reach_the_row() -> None:
    trajectory = TrajectoryFactory.create()
    base: dict[str, Any] = {"trajectory": trajectory.pk, "job": str(trajectory.job_id)}
    base["event"] = "step"
    bad: list[dict[str, Any]] = [
        base | {"step_records": [[10, -1.0]]},
        base | {"step_records": [[10]]},
        base | {"step_records": "steps"},
        base | {"step_records": [[1, 0.0]] * 10_001},
        base | {"prompt_tokens": True},
        base | {"tokens": -1},
        base | {"steps": "many"},
        base | {"tool_s": -0.5},
        {"job": "1"},  # no trajectory
        base | {"trajectory": "x"},
    ]
    for state in bad:
        outcome = router_states_apply([state])
        assert outcome.applied == 0 and outcome.skipped == 1, state
    assert router_states_apply([base | {"status": "nonsense", "tokens": 3}]).applied == 1
    trajectory.refresh_from_db()
    assert (trajectory.status, trajectory.tokens) == (TrajectoryStatus.PENDING, 3)


def test_a_finished_trajectory_keeps_the_steps_the_router_recorded(
    router_names: RegistryNames, redis_url: str
) -> None:
    trajectory = TrajectoryFactory.create(status=TrajectoryStatus.GENERATING)
    running = _snapshot(trajectory, status="tool_call", steps=1, tokens=40, step_tokens=[40])
    assert "step_records" not in running  # only a finished trajectory's snapshot carries them
    finished = _snapshot(
        trajectory, status="finished", steps=2, tokens=100, prompt_tokens=12,
        step_tokens=[40, 60], step_tool_s=[1.5, 0.0],
    )  # fmt: skip
    asyncio.run(_publish(redis_url, router_names, [running, finished]))
    assert router_state_drain().applied == 1
    trajectory.refresh_from_db()
    assert trajectory.status == TrajectoryStatus.FINISHED
    assert trajectory.prompt_tokens == 12
    assert trajectory.step_records == [[40, 1.5], [60, 0.0]]


def test_the_records_of_a_trajectory_ended_before_its_final_snapshot_are_kept() -> None:
    """The trainer's end can reach the control plane first; the router's final snapshot then
    still leaves its step records (once) and its counts, and the status stays the trainer's."""
    trajectory = TrajectoryFactory.create(status=TrajectoryStatus.FINISHED, steps=2, tokens=90)
    finished = _snapshot(
        trajectory, status="finished", steps=2, tokens=100, prompt_tokens=12,
        step_tokens=[40, 60], step_tool_s=[1.5, 0.0],
    )  # fmt: skip
    assert router_states_apply([finished]).applied == 1
    trajectory.refresh_from_db()
    assert trajectory.step_records == [[40, 1.5], [60, 0.0]] and trajectory.prompt_tokens == 12
    assert (trajectory.status, trajectory.tokens) == (TrajectoryStatus.FINISHED, 100)
    again = _snapshot(
        trajectory, status="finished", steps=2, tokens=100, prompt_tokens=99,
        step_tokens=[1, 1], step_tool_s=[0.0, 0.0],
    )  # fmt: skip
    router_states_apply([again])
    trajectory.refresh_from_db()  # the first records stay
    assert trajectory.step_records == [[40, 1.5], [60, 0.0]] and trajectory.prompt_tokens == 12


def test_the_counts_of_a_trajectory_ended_right_after_its_turn_reach_the_row() -> None:
    """A trainer ends a trajectory (REST API, with its reward) before the router's state of its
    last turn arrives: the row takes the router's counts, timings and worker, and keeps the
    trainer's status and reward; counts never go back."""
    trajectory = TrajectoryFactory.create(status=TrajectoryStatus.FINISHED, reward=0.5)
    late = _snapshot(
        trajectory, status="tool_call", steps=2, tokens=127, worker="w0", generation_s=0.75,
    )  # fmt: skip
    assert router_states_apply([late]).applied == 1
    trajectory.refresh_from_db()
    assert (trajectory.status, trajectory.reward) == (TrajectoryStatus.FINISHED, 0.5)
    assert (trajectory.steps, trajectory.tokens, trajectory.llm_worker) == (2, 127, "w0")
    assert trajectory.generation_s == 0.75
    older = _snapshot(trajectory, status="generating", steps=1, tokens=64, worker="w1")
    router_states_apply([older])
    trajectory.refresh_from_db()
    assert (trajectory.steps, trajectory.tokens, trajectory.llm_worker) == (2, 127, "w0")
