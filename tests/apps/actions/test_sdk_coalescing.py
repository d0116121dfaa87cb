"""``AsyncClient`` coalesces concurrent calls (``sdk/loom/coalesce.py``) without changing what
any caller sees: its own action, error and timeout.

The first tests run the real stack (the ``loom`` fixture: API, scheduler service, a local agent
running shell commands); the last ones script the requests to pin down the coalescers' order of
events (which calls share a request, what a refusal or a new id does to a long-poll in flight).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import httpx
import pytest
from loom import ApiError, NotFoundError, ResultTimeout
from loom.coalesce import ResultCoalescer, SubmitCoalescer
from loom.types import Action

from apps.actions.models import Action as ActionRow

pytestmark = pytest.mark.timeout(120)
real_stack = pytest.mark.django_db(transaction=True)


def record_requests(client: Any) -> list[httpx.Request]:
    requests: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        requests.append(request)

    client._http.event_hooks["request"].append(record)
    return requests


def endpoint(request: httpx.Request) -> str:
    path = request.url.path.removeprefix("/api/v1/actions/")
    return f"{request.method} {'{id}/result/' if path.endswith('/result/') else path}"


@real_stack
async def test_concurrent_calls_share_requests_and_each_gets_its_own_result(loom: Any) -> None:
    client, _ = loom
    requests = record_requests(client)

    async def trajectory(index: int) -> tuple[int, Action]:
        action = await client.submit(command=f"echo call-{index}", demand={"cpu": 1})
        return index, await client.result(action.id, timeout=60)

    ended = await asyncio.gather(*(trajectory(i) for i in range(40)))
    for index, action in ended:
        assert (action.status, action.output.strip()) == ("succeeded", f"call-{index}")
    assert len({action.id for _, action in ended}) == 40
    assert await asyncio.to_thread(ActionRow.objects.count) == 40
    kinds = Counter(endpoint(r) for r in requests)
    # Made in one turn, the 40 submits go out as one batch. The first result() finds nothing
    # else in flight and long-polls alone; the others share await polls, each answering as soon
    # as one of its actions ends (2 cores: they end a few at a time).
    assert kinds["POST "] + kinds["POST batch/"] <= 2 and kinds["POST batch/"] == 1, kinds
    assert kinds["GET {id}/result/"] <= 1 and kinds["POST await/"] <= 40, kinds
    batch = next(r for r in requests if r.url.path.endswith("/batch/"))
    assert batch.url.params["representation"] == "full"


@real_stack
async def test_concurrent_runs_end_like_lone_ones(loom: Any) -> None:
    client, _ = loom
    alone = await client.run(command="echo alone", demand={"cpu": 1}, timeout=60)
    together = await asyncio.gather(
        *(client.run(command=f"echo run-{i}", demand={"cpu": 1}, timeout=60) for i in range(12))
    )
    assert [a.output.strip() for a in together] == [f"run-{i}" for i in range(12)]
    assert all(a.done and a.timings.act_s is not None for a in together)
    # A coalesced submit answers with the same fields as a lone one.
    assert set(together[0].raw) >= set(alone.raw) - {"created"}


@real_stack
async def test_a_bad_submit_among_coalesced_ones_fails_alone(loom: Any) -> None:
    client, _ = loom
    calls = [client.submit(command=f"echo {i}", demand={"cpu": 1}) for i in range(8)]
    calls.insert(5, client.submit(command="echo bad", demand={"cpu": {"min": 3, "max": 2}}))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    failures = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(failures) == 1 and outcomes[5] is failures[0]
    assert isinstance(failures[0], ApiError) and failures[0].status_code == 400
    assert failures[0].errors[0]["field"] == "demand.cpu.min"
    stored = [o for o in outcomes if o not in failures]
    assert all(isinstance(o, Action) and o.status == "queued" for o in stored)
    # The rejected batch stored nothing; re-sent one by one, each good item is stored once.
    assert await asyncio.to_thread(ActionRow.objects.count) == 8


@real_stack
async def test_an_unknown_id_among_coalesced_results_fails_alone(loom: Any) -> None:
    client, _ = loom
    submitted = await asyncio.gather(
        *(client.submit(command=f"echo {i}", demand={"cpu": 1}) for i in range(5))
    )
    waits = [client.result(a.id, timeout=60) for a in submitted]
    waits.insert(2, client.result(10**12, timeout=60))
    outcomes = await asyncio.gather(*waits, return_exceptions=True)
    assert isinstance(outcomes[2], NotFoundError)
    others = outcomes[:2] + outcomes[3:]
    assert [a.output.strip() for a in others if isinstance(a, Action)] == [str(i) for i in range(5)]


@real_stack
async def test_each_coalesced_result_keeps_its_own_timeout(loom: Any) -> None:
    client, _ = loom
    slow = await client.submit(command="sleep 20", demand={"cpu": 1})
    quick = await client.submit(command="echo quick", demand={"cpu": 1})
    started = asyncio.get_running_loop().time()
    outcomes = await asyncio.gather(
        client.result(slow.id, timeout=0.5),
        client.result(quick.id, timeout=60),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], ResultTimeout)
    assert isinstance(outcomes[1], Action) and outcomes[1].output.strip() == "quick"
    assert asyncio.get_running_loop().time() - started < 15
    await client.cancel(slow.id)


@real_stack
async def test_as_completed_beyond_the_servers_id_limit_polls_every_id_in_turn(
    loom: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loom import protocol

    monkeypatch.setattr(protocol, "MAX_AWAIT_IDS", 3)
    client, _ = loom
    requests = record_requests(client)
    batch = await client.submit_batch(
        [{"command": f"echo {i}", "demand": {"cpu": 1}} for i in range(8)]
    )
    seen = [a async for a in client.as_completed([a.id for a in batch], timeout=60)]
    assert sorted(a.id for a in seen) == sorted(a.id for a in batch)
    polls = [r for r in requests if r.url.path.endswith("/await/")]
    assert polls and all(len(json.loads(r.content)["ids"]) <= 3 for r in polls)


# --- the coalescers' order of events, with scripted requests ---------------------------------


def ended(action_id: int) -> Action:
    return Action.from_api({"id": action_id, "status": "succeeded", "output": f"out-{action_id}"})


class ScriptedAwait:
    """``POST /actions/await/`` as a function: answers once one of its ids is released."""

    def __init__(self, refuse: frozenset[int] = frozenset(), answer_after_s: float = 0.0) -> None:
        self.answer_after_s = answer_after_s  # how long the server takes over each poll
        self.calls: list[tuple[list[int], float]] = []
        self.cancelled: list[list[int]] = []
        self.released: set[int] = set()
        self.changed = asyncio.Event()
        self.refuse = refuse

    def release(self, *ids: int) -> None:
        self.released.update(ids)
        self.changed.set()

    async def __call__(self, ids: list[int], wait_s: float) -> list[Action]:
        self.calls.append((list(ids), wait_s))
        if self.refuse & set(ids):
            raise NotFoundError(404, {"errors": [{"field": "ids[0]", "reason": "no action"}]})
        try:
            await asyncio.sleep(self.answer_after_s)
            while not (done := [i for i in ids if i in self.released]) and wait_s > 0:
                self.changed.clear()
                await self.changed.wait()
        except asyncio.CancelledError:
            self.cancelled.append(list(ids))
            raise
        return [ended(i) for i in done]


async def test_results_awaited_in_one_turn_share_one_poll() -> None:
    server = ScriptedAwait()
    results = ResultCoalescer(server, wait_s=30)
    waits = [asyncio.create_task(results.result(i)) for i in (1, 2, 3)]
    await asyncio.sleep(0.01)
    assert server.calls == [([1, 2, 3], 30)]
    server.release(2)
    assert (await waits[1]).output == "out-2"
    await asyncio.sleep(0.01)
    assert server.calls[1] == ([1, 3], 30)  # the rest, re-polled together
    server.release(1, 3)
    assert [(await w).id for w in waits] == [1, 2, 3]
    assert not results.busy


async def test_a_new_id_beyond_the_poll_limit_absorbs_the_youngest_poll_once_it_has_waited() -> (
    None
):
    server = ScriptedAwait()
    results = ResultCoalescer(server, wait_s=30, max_polls=2, absorb_after_s=0.1)
    waits = []
    for action_id in (1, 2, 3):
        waits.append(asyncio.create_task(results.result(action_id)))
        await asyncio.sleep(0.01)  # each in its own turn: its own poll, up to the limit
    assert [ids for ids, _ in server.calls] == [[1], [2]]  # 3 waits: the polls are young
    await asyncio.sleep(0.1)
    assert [ids for ids, _ in server.calls] == [[1], [2], [2, 3]]
    assert server.cancelled == [[2]]
    server.release(3)
    assert (await waits[2]).id == 3
    server.release(1, 2)
    assert {(await w).id for w in waits} == {1, 2, 3}


@pytest.mark.parametrize("answer_after_s", [0.05, 0.15])
async def test_new_ids_arriving_faster_than_polls_answer_do_not_starve_them(
    answer_after_s: float,
) -> None:
    # Absorbing the oldest poll for every new id would abandon each poll before its answer
    # came back: a steady stream of awaits would then never see a single result. Here polls
    # take longer than new ids' spacing, and (0.15) longer than absorb_after_s as well.
    server = ScriptedAwait(answer_after_s=answer_after_s)
    results = ResultCoalescer(server, wait_s=30, max_polls=2, absorb_after_s=0.1)
    waits = []
    for action_id in range(1, 41):
        server.release(action_id)  # ended already; the server still takes its time per poll
        waits.append(asyncio.create_task(results.result(action_id)))
        await asyncio.sleep(0.01)
    assert sum(w.done() for w in waits) >= 10  # results arrived while new ids kept coming
    assert [a.id for a in await asyncio.gather(*waits)] == list(range(1, 41))
    assert max(len(ids) for ids, _ in server.calls) > 1  # the held ids went out together


async def test_a_refused_id_fails_only_its_own_caller() -> None:
    server = ScriptedAwait(refuse=frozenset({2}))
    server.release(1, 3)
    results = ResultCoalescer(server, wait_s=30)
    outcomes = await asyncio.gather(*(results.result(i) for i in (1, 2, 3)), return_exceptions=True)
    assert isinstance(outcomes[1], NotFoundError)
    assert [o.id for o in outcomes if isinstance(o, Action)] == [1, 3]
    assert ([1], 0) in server.calls and ([3], 0) in server.calls  # looked at one by one


async def test_a_caller_that_gives_up_leaves_the_others_waiting() -> None:
    server = ScriptedAwait()
    results = ResultCoalescer(server, wait_s=30)
    keep = asyncio.create_task(results.result(1))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(results.result(2), 0.05)
    server.release(1)
    assert (await keep).id == 1
    assert not results.busy  # id 2 was dropped with its last caller


class ScriptedSubmits:
    """The submit requests as functions: a lone submit stays in flight until ``gate`` opens, a
    batch answers at once; ``sent`` lists what went out (an ``n``, or a batch's list of them)."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.gate = asyncio.Event()

    async def one(self, body: dict[str, Any]) -> Action:
        self.sent.append(body["n"])
        await self.gate.wait()
        return ended(body["n"])

    async def batch(self, bodies: list[dict[str, Any]]) -> list[Action]:
        self.sent.append([b["n"] for b in bodies])
        return [ended(b["n"]) for b in bodies]


async def test_submits_made_during_a_submit_go_out_as_one_batch() -> None:
    server = ScriptedSubmits()
    submits = SubmitCoalescer(server.one, server.batch, max_batch=3)
    first = asyncio.create_task(submits.submit({"n": 0}))
    await asyncio.sleep(0.01)
    rest = [asyncio.create_task(submits.submit({"n": n})) for n in range(1, 6)]
    await asyncio.sleep(0.01)
    assert server.sent == [0]  # the rest wait for the request in flight
    server.gate.set()
    assert [(await t).id for t in [first, *rest]] == list(range(6))
    assert server.sent == [0, [1, 2, 3], [4, 5]]
    assert not submits.busy


async def test_a_submit_cancelled_before_it_is_sent_is_never_sent() -> None:
    server = ScriptedSubmits()
    submits = SubmitCoalescer(server.one, server.batch)
    first = asyncio.create_task(submits.submit({"n": 0}))
    await asyncio.sleep(0.01)
    given_up, kept = (asyncio.create_task(submits.submit({"n": n})) for n in (1, 2))
    await asyncio.sleep(0.01)
    given_up.cancel()
    server.gate.set()
    assert (await first).id == 0 and (await kept).id == 2
    assert server.sent == [0, 2]  # 1 was still waiting its turn: dropped, not submitted


async def test_an_answer_of_the_wrong_shape_fails_its_callers_instead_of_hanging() -> None:
    async def send_one(body: dict[str, Any]) -> Action:
        return ended(body["n"])

    async def send_batch(bodies: list[dict[str, Any]]) -> list[Action]:
        return [ended(bodies[0]["n"])]  # one item for several

    submits = SubmitCoalescer(send_one, send_batch)
    outcomes = await asyncio.wait_for(
        asyncio.gather(*(submits.submit({"n": n}) for n in range(3)), return_exceptions=True), 5
    )
    # Made in one turn, the three went as one batch; none gets another's answer.
    assert all(isinstance(o, ValueError) for o in outcomes), outcomes
    assert not submits.busy


async def test_a_poll_nobody_waits_on_any_more_is_abandoned() -> None:
    server = ScriptedAwait()
    results = ResultCoalescer(server, wait_s=30)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.gather(results.result(1), results.result(2)), 0.05)
    await asyncio.sleep(0.01)
    assert server.cancelled == [[1, 2]]  # the request hung up, not left to run out its 30 s
    assert not results.busy


async def test_more_ids_than_one_request_may_carry_take_more_polls() -> None:
    server = ScriptedAwait()
    server.release(1, 2, 3, 4, 5)
    results = ResultCoalescer(server, wait_s=30, max_ids=2)
    ended = await asyncio.gather(*(results.result(i) for i in range(1, 6)))
    assert [a.id for a in ended] == [1, 2, 3, 4, 5]
    assert [ids for ids, _ in server.calls] == [[1, 2], [3, 4], [5]]


def test_as_completed_rotates_what_it_polls() -> None:
    from loom.protocol import next_pending

    # Polled 1-3 of 1-5; 2 ended: the unpolled go first, the polled ones to the back.
    assert next_pending([1, 2, 3, 4, 5], 3, [ended(2)]) == [4, 5, 1, 3]


def _loop_answers_in_child(client: Any, answers: Any) -> None:
    with client._call(), client._call() as shared:  # a call alongside another: the loop thread
        loop, _ = shared
        answers.put(loop.call(asyncio.sleep(0, result=42)))


@pytest.mark.processes
def test_a_forked_child_gets_a_loop_thread_of_its_own() -> None:
    """A trainer that forks workers after using a Client: the child inherits the loop object but
    not its thread; a call there must start a new one, never wait on the dead one forever."""
    import multiprocessing

    from loom import Client

    client = Client("http://127.0.0.1:9", "loom_test")
    try:
        with client._call(), client._call() as shared:
            assert shared is not None
            assert shared[0].call(asyncio.sleep(0, result=1)) == 1
        fork = multiprocessing.get_context("fork")
        answers = fork.Queue()
        child = fork.Process(target=_loop_answers_in_child, args=(client, answers))
        child.start()
        child.join(20)
        alive = child.is_alive()
        if alive:
            child.kill()
        assert not alive and child.exitcode == 0 and answers.get(timeout=1) == 42
    finally:
        client.close()
