"""The demo workload stops at once: Ctrl-C on ``make demo`` must not wait for the actions its
trajectories were awaiting, which the stopped runtime never ends."""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async

from apps.actions.models import Action, ActionStatus
from apps.embedded.demo_workload import DemoWorkload
from tests.factories import ActionFactory, JobFactory, PoolFactory

pytestmark = pytest.mark.django_db(transaction=True)


async def test_stopping_the_workload_ends_the_waits_for_its_actions() -> None:
    job = await sync_to_async(JobFactory.create)()
    pool = await sync_to_async(PoolFactory.create)()
    workload = DemoWorkload(job=job, pool=pool, concurrent_trajectories=1)
    submitted: list[Action] = []

    def submit() -> Action:  # an action nothing will ever run
        action = ActionFactory.create(job=job, status=ActionStatus.QUEUED)
        submitted.append(action)
        return action

    waiting = asyncio.ensure_future(workload._until_ended(submit, 120))
    while not submitted:
        await asyncio.sleep(0.05)
    stop = asyncio.Event()
    stop.set()
    started = time.monotonic()
    await workload.run(stop)
    action = await asyncio.wait_for(waiting, timeout=10)
    assert action.status == ActionStatus.QUEUED
    assert time.monotonic() - started < 5  # not the 120 s the wait was given
