"""The SDK's trajectory calls against the real API, and its LLM turns through the real router
on the CPU engine (the embedded mode's: keys and trajectories read from the database)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
from loom import Client, LoomError

from apps.embedded.llm import EmbeddedLlm
from apps.trajectories.models import Trajectory
from controlplane.wsgi import application

pytestmark = pytest.mark.django_db(transaction=True)

MESSAGES = [{"role": "user", "content": "write the next test"}]


async def test_create_generate_stream_and_end(
    job_actor: Any, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = str(tmp_path)  # the tiny model is written here
    llm = EmbeddedLlm(port=0, slots=1)
    await llm.start()
    stopped = False
    client = Client(
        "http://testserver",
        job_actor.raw_key,
        transport=httpx.WSGITransport(app=application),
        llm_url=llm.url,
    )
    try:
        created = await asyncio.to_thread(client.create_trajectory, prompt_id="p", group_id="g")
        assert created.status == "pending" and created.job == job_actor.job.pk

        def turns() -> tuple[Any, str]:
            turn = client.generate(
                created.id, MESSAGES, model=llm.model_name, max_tokens=8, ignore_eos=True, seed=1
            )
            streamed = "".join(
                client.stream(
                    created.id, MESSAGES, model=llm.model_name, max_tokens=8, ignore_eos=True,
                    seed=1,
                )
            )  # fmt: skip
            return turn, streamed

        turn, streamed = await asyncio.to_thread(turns)
        assert turn.completion_tokens == 8 and turn.finish_reason == "length"
        assert streamed == turn.text  # same worker, same seed: the same tokens
        await llm.stop()  # flushes the router's state to the row
        stopped = True
        progress = await asyncio.to_thread(client.get_trajectory, created.id)
        assert (progress.steps, progress.tokens) == (2, 16) and progress.llm_worker
        ended = await asyncio.to_thread(client.end_trajectory, created.id, reward=0.5)
        assert (ended.status, ended.reward) == ("finished", 0.5)
    finally:
        if not stopped:
            await llm.stop()
        client.close()


async def test_turns_of_an_ended_or_foreign_trajectory_are_refused(
    job_actor: Any, other_actor: Any, settings: Any, tmp_path: Path
) -> None:
    settings.VAR_DIR = str(tmp_path)
    llm = EmbeddedLlm(port=0, slots=1)
    await llm.start()
    transport = httpx.WSGITransport(app=application)
    mine = Client("http://testserver", job_actor.raw_key, transport=transport, llm_url=llm.url)
    theirs = Client("http://testserver", other_actor.raw_key, transport=transport, llm_url=llm.url)
    try:
        trajectory = await asyncio.to_thread(mine.create_trajectory)
        with pytest.raises(LoomError, match="404"):
            await asyncio.to_thread(
                theirs.generate, trajectory.id, MESSAGES, model=llm.model_name, max_tokens=2
            )
        await asyncio.to_thread(mine.end_trajectory, trajectory.id, status="aborted")
        with pytest.raises(LoomError, match="404"):
            await asyncio.to_thread(
                mine.generate, trajectory.id, MESSAGES, model=llm.model_name, max_tokens=2
            )
        with pytest.raises(LoomError, match="no LLM router"):
            Client("http://testserver", job_actor.raw_key).generate(1, MESSAGES, model="m")
    finally:
        await llm.stop()
        mine.close()
        theirs.close()


async def test_ending_right_after_a_turn_keeps_the_routers_steps(
    job_actor: Any, settings: Any, tmp_path: Path
) -> None:
    """A trainer ends a trajectory as soon as its last turn returns: the router's record of its
    steps (the length predictor's training data) still reaches the row."""
    settings.VAR_DIR = str(tmp_path)
    llm = EmbeddedLlm(port=0, slots=1)
    await llm.start()
    client = Client(
        "http://testserver",
        job_actor.raw_key,
        transport=httpx.WSGITransport(app=application),
        llm_url=llm.url,
    )
    try:
        created = await asyncio.to_thread(client.create_trajectory, prompt_id="p")

        def turn_then_end() -> Any:
            client.generate(
                created.id, MESSAGES, model=llm.model_name, max_tokens=8, ignore_eos=True, seed=1
            )
            return client.end_trajectory(created.id, reward=1.0)

        ended = await asyncio.to_thread(turn_then_end)
        assert (ended.status, ended.reward) == ("finished", 1.0)
    finally:
        await llm.stop()  # flushes the router's state to the row
        client.close()
    row = await Trajectory.objects.aget(pk=created.id)
    assert row.status == "finished" and row.reward == 1.0
    assert row.step_records == [[8, 0.0]]


def test_a_router_that_cannot_be_reached_does_not_keep_a_trajectory_from_ending(
    job_actor: Any,
) -> None:
    transport = httpx.WSGITransport(app=application)
    with Client(
        "http://testserver", job_actor.raw_key, transport=transport, llm_url="http://127.0.0.1:9"
    ) as client:
        created = client.create_trajectory()
        ended = client.end_trajectory(created.id, status="aborted")
    assert ended.status == "aborted"
