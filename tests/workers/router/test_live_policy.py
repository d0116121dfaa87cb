"""A running router adopts the policy the control plane stores for it, without a restart."""

from __future__ import annotations

import json

import httpx

from tests.workers.router.conftest import Stack
from tests.workers.router.test_lifecycle import HEADERS, eventually
from workers.router.live_policy import PolicyFeed
from workers.router.policies import LeastLoadPolicy, RoundRobinPolicy, make_policy


def feed_for(stack: Stack) -> PolicyFeed:
    return PolicyFeed(
        stack.registry.client, stack.names, "router", stack.app.forwarder, make_policy,
        interval_s=0.02,
    )  # fmt: skip


async def store(stack: Stack, version: int, policy: str, predictor: str = "prompt_history") -> None:
    value = {"version": version, "policy": policy, "predictor": predictor}
    await stack.registry.client.set(stack.names.router_policy("router"), json.dumps(value))


async def step(http: httpx.AsyncClient, trajectory: str) -> str:
    body = {"model": "tiny", "prompt": "a b", "max_tokens": 2}
    response = await http.post(
        "/v1/completions", json=body, headers={**HEADERS, "X-Loom-Trajectory": trajectory}
    )
    assert response.status_code == 200
    return str(
        (await http.get(f"/v1/loom/trajectories/{trajectory}", headers=HEADERS)).json()[
            "llm_worker"
        ]
    )


async def test_the_router_switches_to_round_robin_while_serving(stack: Stack) -> None:
    feed = feed_for(stack)
    await feed.start()
    try:
        assert stack.app.forwarder.policy.name == "heddle"
        trajectory = await stack.trajectory("51")
        async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
            await step(http, trajectory)
            await store(stack, 1, "round_robin")
            await eventually(
                lambda: isinstance(stack.app.forwarder.policy, RoundRobinPolicy), "adopted"
            )
            # round robin alternates the same trajectory's steps over both workers
            workers = {await step(http, trajectory) for _ in range(4)}
        assert workers == {"w0", "w1"}
        assert feed.version == "1"
    finally:
        await feed.stop()


async def test_same_version_is_not_adopted_twice_and_unknown_values_are_ignored(
    stack: Stack,
) -> None:
    feed = feed_for(stack)
    await store(stack, 3, "least_load")
    assert await feed.refresh() is True
    adopted = stack.app.forwarder.policy
    assert isinstance(adopted, LeastLoadPolicy)
    assert await feed.refresh() is False
    assert stack.app.forwarder.policy is adopted
    await store(stack, 4, "fastest")
    assert await feed.refresh() is False
    assert stack.app.forwarder.policy is adopted
    await store(stack, 5, "heddle", predictor="oracle")
    assert await feed.refresh() is False
    assert stack.app.forwarder.policy is adopted


async def test_the_prompt_history_prior_is_restored_when_chosen(stack: Stack) -> None:
    table = stack.app.forwarder.table
    sentinel = object()
    table.predictor = sentinel  # type: ignore[assignment]
    feed = feed_for(stack)
    await store(stack, 1, "heddle", predictor="prompt_history")
    assert await feed.refresh() is True
    assert table.predictor is table.history
    await store(stack, 2, "heddle", predictor="progressive")
    assert await feed.refresh() is True
    assert table.predictor is sentinel  # the model it started with: nothing newer trained
    assert feed.predictor == "progressive"
