"""DARTS group rollouts through the router (``POST /v1/loom/groups``) on emulated engines:
planning, streamed kept samples, early-stop aborts, bad input, clients that leave, lost workers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.workers.router.conftest import KEY, MODEL, Stack, start_stack, stop_stack
from tests.workers.router.test_lifecycle import eventually
from workers.algorithms.darts import adaptive_total_budget
from workers.router.policies import RoundRobinPolicy

pytestmark = pytest.mark.redis

HEADERS = {"Authorization": f"Bearer {KEY}"}
PROMPTS = ["fix the failing test", "write a parser", {"id": "q3", "prompt": "sort a list"}]


def group_body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "prompts": PROMPTS, "group_size": 3, **fields}


async def stream_group(stack: Stack, body: dict[str, Any]) -> list[dict[str, Any]]:
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=60) as http,
        http.stream(
            "POST", "/v1/loom/groups", json={**body, "stream": True}, headers=HEADERS
        ) as response,
    ):
        assert response.status_code == 200, await response.aread()
        lines = [line[6:] async for line in response.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def engines_idle(stack: Stack) -> bool:
    return not stack.pool.requests and all(
        e.num_running == 0 and e.num_queued == 0 for e in stack.engines
    )


async def test_standard_sampling_keeps_every_sample(stack: Stack) -> None:
    events = await stream_group(stack, group_body(budget={"policy": "standard"}))
    assert events[0]["type"] == "group.planned" and events[0]["allocations"] == [3, 3, 3]
    kept = [e for e in events if e["type"] == "sample.kept"]
    assert sorted((e["prompt"], e["sample"]) for e in kept) == [
        (p, s) for p in range(3) for s in range(3)
    ]
    assert all(e["text"] and e["tokens"] > 0 for e in kept)
    stats = events[-1]["statistics"]
    assert events[-1]["type"] == "group.complete"
    assert stats["total_budget"] == 9 and stats["kept"] == 9 and stats["aborted"] == 0
    assert stats["kept_tokens"] == sum(e["tokens"] for e in kept)
    await eventually(lambda: engines_idle(stack), "engines idle")


async def test_adaptive_budget_over_samples_and_keeps_m_per_prompt(stack: Stack) -> None:
    first = await stream_group(stack, group_body())
    plan = first[0]
    assert plan["total_budget"] == 13  # floor(1.5 · N · M): the calibration target, App. B
    assert sum(plan["allocations"]) == 13 and all(3 <= a <= 6 for a in plan["allocations"])
    completes = [e for e in first if e["type"] == "prompt.complete"]
    assert len(completes) == 3 and all(len(e["kept"]) == 3 for e in completes)
    kept = [e for e in first if e["type"] == "sample.kept"]
    assert len(kept) == 9
    # dual-end prompts too send a settled short sample before their pool ends (§4.3.2)
    completed_at = {e["prompt"]: i for i, e in enumerate(first) if e["type"] == "prompt.complete"}
    assert any(
        i < completed_at[e["prompt"]] for i, e in enumerate(first) if e["type"] == "sample.kept"
    )
    stats = first[-1]["statistics"]
    assert stats["kept"] + stats["dropped"] + stats["aborted"] + stats["lost"] == 13
    assert stats["next"]["trade_off"] is not None  # λ calibrated on the first group
    assert all(v is not None for v in stats["next"]["prompt_variances"])
    # later groups: Eq. 9 from the ρ the previous groups left, with λ and k held
    previous = stats
    for _ in range(2):
        events = await stream_group(stack, group_body())
        expected = adaptive_total_budget(
            rho=previous["next"]["rho"], trade_off=previous["next"]["trade_off"],
            cost_slope=previous["next"]["cost_slope"], prompts=3, group_size=3,
        )  # fmt: skip
        assert events[0]["total_budget"] == expected
        previous = events[-1]["statistics"]
        assert previous["next"]["trade_off"] == stats["next"]["trade_off"]  # calibrated once
    await eventually(lambda: engines_idle(stack), "engines idle")


async def test_tail_pruned_prompts_stream_kept_samples_early_and_abort_the_rest(
    stack: Stack,
) -> None:
    events = await stream_group(stack, group_body(budget={"policy": "fixed", "total": 18}))
    assert events[0]["pruned_prompts"] == [0, 1, 2]  # M'_i = 2M everywhere: shortest-only
    for prompt in range(3):
        mine = [e for e in events if e.get("prompt") == prompt]
        kinds = [e["type"] for e in mine]
        # the first valid finisher is sent before its prompt is settled (§4.3.2 streaming)
        assert kinds.index("sample.kept") < kinds.index("prompt.complete")
        complete = mine[kinds.index("prompt.complete")]
        assert len(complete["kept"]) == 3 and len(complete["aborted"]) == 3  # early stop
    stats = events[-1]["statistics"]
    assert stats["aborted"] == 9 and stats["kept"] == 9
    await eventually(lambda: engines_idle(stack), "engines idle")
    assert sum(e.stats.requests_aborted for e in stack.engines) >= 1


async def test_token_chunks_stream_every_candidate_as_it_decodes(stack: Stack) -> None:
    events = await stream_group(stack, group_body(budget={"policy": "standard"}, token_chunk=4))
    kept = {(e["prompt"], e["sample"]): e["text"] for e in events if e["type"] == "sample.kept"}
    chunks: dict[tuple[int, int], str] = {}
    for event in events:
        if event["type"] == "sample.tokens":
            assert event["draw"] == 1  # no worker was lost: every slot drew once
            key = (event["prompt"], event["sample"])
            chunks[key] = chunks.get(key, "") + event["text"]
    assert chunks, "no token chunk arrived"
    for key, prefix in chunks.items():
        assert kept[key].startswith(prefix)  # chunks are the text's prefix, in order
    first_chunk = next(i for i, e in enumerate(events) if e["type"] == "sample.tokens")
    first_kept = next(i for i, e in enumerate(events) if e["type"] == "sample.kept")
    assert first_chunk < first_kept  # tokens reach the trainer before any sample completes


async def test_one_json_answer_without_stream(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=60) as http:
        answer = await http.post(
            "/v1/loom/groups", json=group_body(budget={"policy": "fixed", "total": 12}),
            headers=HEADERS,
        )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert len(body["samples"]) == 9
    assert body["statistics"]["total_budget"] == 12


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"group_size": 0}, "group_size"),
        ({"prompts": []}, "prompts"),
        ({"budget": {"policy": "lavish"}}, "budget.policy"),
        ({"budget": {"policy": "fixed"}}, "budget.total"),
        ({"budget": {"policy": "fixed", "total": 5}}, "budget.total"),
        ({"group_size": 1000, "prompts": ["a"] * 5}, "prompts"),
        ({"sampling": {"n": 4}}, "sampling.n"),
        ({"sampling": {"temperature": 9}}, "temperature"),
        ({"prompts": [{"prompt": "a", "messages": []}]}, "prompts[0]"),
        ({"surprise": 1}, "surprise"),
        ({"token_chunk": 8}, "token_chunk"),  # chunks need a stream
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    stack: Stack, fields: dict[str, Any], field: str
) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        answer = await http.post("/v1/loom/groups", json=group_body(**fields), headers=HEADERS)
    assert answer.status_code == 400, answer.text
    assert answer.json()["errors"][0]["field"] == field
    assert not stack.pool.requests


async def test_a_group_needs_the_jobs_key_and_a_served_model(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=30) as http:
        anonymous = await http.post("/v1/loom/groups", json=group_body())
        unknown = await http.post(
            "/v1/loom/groups", json=group_body(model="gpt-9"), headers=HEADERS
        )
    assert anonymous.status_code == 401
    assert unknown.status_code == 404 and unknown.json()["errors"][0]["field"] == "model"


async def test_a_client_that_leaves_aborts_every_candidate(stack: Stack) -> None:
    body = group_body(budget={"policy": "standard"}, sampling={"max_tokens": 10**5}, stream=True)
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=60) as http,
        http.stream("POST", "/v1/loom/groups", json=body, headers=HEADERS) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break  # the plan arrived; the candidates are decoding
        await eventually(lambda: len(stack.pool.requests) == 9, "candidates in flight")
    await eventually(lambda: engines_idle(stack), "every candidate aborted on its engine")
    assert sum(e.stats.requests_aborted for e in stack.engines) == 9
    await eventually(lambda: not stack.app.groups.running, "the group's handler ended")
    assert not [t for t in stack.app.table.active if t.startswith("group-")]


@pytest.fixture
async def round_robin_stack(redis_url: str) -> AsyncIterator[Stack]:
    started = await start_stack(redis_url, policy=RoundRobinPolicy())  # candidates on both
    yield started
    await stop_stack(started)


async def kill_mid_group(stack: Stack, body: dict[str, Any], killed: int) -> list[dict[str, Any]]:
    """Stream a group; once the first ``killed`` workers stream candidates, lose them (the
    router declares them dead, cutting their streams, and they never answer again)."""
    events: list[dict[str, Any]] = []
    victims = stack.pool.workers[:killed]
    async with (
        httpx.AsyncClient(base_url=stack.url, timeout=60) as http,
        http.stream(
            "POST", "/v1/loom/groups", json={**body, "stream": True}, headers=HEADERS
        ) as response,
    ):
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data: {"):
                break  # planned: the candidates are on their way
        await eventually(
            lambda: all(any(f.response is not None for f in w.in_flight.values()) for w in victims),
            "the victims streaming",
        )
        for worker, server in zip(victims, stack.engine_servers, strict=False):
            stack.pool.mark_dead(worker, "killed by the test")
            await server.stop()
        events += [json.loads(x[6:]) async for x in lines if x.startswith("data: {")]
    await eventually(lambda: not stack.pool.requests, "nothing in flight")
    await eventually(lambda: not stack.app.groups.running, "the group's handler ended")
    return events


async def test_a_client_that_leaves_at_once_leaves_nothing_running(stack: Stack) -> None:
    body = group_body(budget={"policy": "fixed", "total": 18}, stream=True)
    body["sampling"] = {"max_tokens": 10**6}
    for _ in range(3):
        async with (
            httpx.AsyncClient(base_url=stack.url, timeout=60) as http,
            http.stream("POST", "/v1/loom/groups", json=body, headers=HEADERS),
        ):
            pass  # gone as soon as the answer starts
    await eventually(lambda: not stack.app.groups.running, "the groups ended")
    await eventually(lambda: engines_idle(stack), "nothing decodes")


async def test_a_worker_lost_mid_group_is_absorbed_or_the_group_fails_retryably(
    round_robin_stack: Stack,
) -> None:
    body = group_body(budget={"policy": "fixed", "total": 18})
    last = (await kill_mid_group(round_robin_stack, body, killed=1))[-1]
    if last["type"] == "group.complete":  # the redundancy (or a redraw) absorbed the loss
        assert last["statistics"]["kept"] == 9
        assert last["statistics"]["lost"] >= 1 or any(
            s["draws"] > 1 for row in last["statistics"]["samples"] for s in row
        )
    else:
        assert last["type"] == "group.error" and last["error"]["retryable"] is True


async def test_with_every_worker_lost_the_group_ends_with_a_retryable_error(
    round_robin_stack: Stack,
) -> None:
    body = group_body(budget={"policy": "standard"})
    error = (await kill_mid_group(round_robin_stack, body, killed=2))[-1]
    assert error["type"] == "group.error", error
    assert error["error"]["retryable"] is True
    assert error["error"]["code"] in ("worker_lost", "no_worker")
