"""GPU services end to end with real processes (arl-tangram §5.3): the web app (uvicorn), the
scheduler (``manage.py run_scheduler``) on a GPU pool and one GPU agent
(``python -m workers.agents.gpu``, two CPU stand-in devices, a PyTorch reward model and a teacher
from checkpoints it writes itself), on Redis and this test's PostgreSQL database.

Service actions submitted through the REST API run on the agent and end with their scores; a
request larger than the service allows is a 400 at submission; the agents' service cache is
stored with the node, and after the scheduler is SIGKILLed and restarted each service's next
action goes back to the chunk where that service is still warm. A GPU agent SIGKILLed
mid-request: the request runs again on another node once, then fails ``agent_lost``. A service
whose weights do not load: its actions fail with a reason, the node's other services still run.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import override_settings

from apps.actions.models import TERMINAL_STATUSES, Action
from apps.actions.services import ActionSpec, action_submit
from apps.core.demand import parse_demand
from apps.resources.models import Node, PoolKind, Service
from tests.apps.actions.cluster import Cluster
from tests.factories import JobFactory, PoolFactory, make_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

REWARD = {"input_ids": [[1, 2, 3], [4, 5, 6, 7]]}
TEACHER = {"input_ids": [[1, 2, 3, 4]]}


@pytest.fixture
def gpu_cluster(
    redis_url: str, postgres_url: str, tmp_path: Path, starts_processes: None
) -> Iterator[Cluster]:
    pool = f"gpu-{uuid.uuid4().hex[:8]}"
    PoolFactory.create(name=pool, kind=PoolKind.GPU)
    running = Cluster(redis_url=redis_url, database_url=postgres_url, work=tmp_path, pool=pool)
    try:
        with override_settings(REDIS_URL=redis_url, LOOM_STREAM_PREFIX=running.prefix):
            yield running
    finally:
        running.stop_all()


def _wait(condition: Callable[[], bool], timeout_s: float, what: str, cluster: Cluster) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            rows = list(Action.objects.values("id", "status", "attempts", "error_reason"))
            raise AssertionError(f"{what} not reached in {timeout_s} s: {rows}\n{cluster.logs()}")
        time.sleep(0.1)


def _ended(ids: list[int]) -> Callable[[], bool]:
    return lambda: all(
        status in TERMINAL_STATUSES
        for status in Action.objects.filter(pk__in=ids).values_list("status", flat=True)
    )


def _submit(web: str, key: str, items: list[dict[str, Any]]) -> list[int]:
    response = httpx.post(
        f"{web}/api/v1/actions/batch/",
        json={"items": items},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert response.status_code == 201, response.text
    return [item["id"] for item in response.json()["items"]]


def _gpus(action: Action) -> list[int]:
    assert action.allocation is not None
    return list(action.allocation["gpus"])


def _stored_cache(node: str) -> dict[str, int]:
    """service → first GPU of the chunk it is resident on, as the store keeps the node."""
    capacity = Node.objects.get(name=node).capacity
    return {entry["service"]: entry["start"] for entry in capacity.get("cache", [])}


def test_service_actions_run_and_the_cache_survives_a_scheduler_kill(gpu_cluster: Cluster):
    cluster = gpu_cluster
    pool = cluster.pool
    node = f"{pool}-g1"
    for name, task in (("rm", "reward"), ("teacher", "logprobs")):
        Service.objects.create(
            name=name,
            pool_id=PoolFactory.create(name=pool).pk,
            backend="torch",
            task=task,
            model=str(cluster.work / name),
            allowed_dop=[1],
            max_sequences=4,
            max_tokens=64,
        )
    key = make_key(job=JobFactory.create())[1]
    web = cluster.start_web()
    cluster.start_scheduler()
    cluster.start_gpu_agent(
        node,
        [f"rm=torch:reward:{cluster.work / 'rm'}", f"teacher=torch:logprobs:{cluster.work / 't'}"],
    )
    _wait(
        lambda: Node.objects.filter(name=node, gpus=2, status="online").exists(),
        120,
        "the GPU agent registered with its 2 devices",
        cluster,
    )

    # Too large for the service: a 400 naming the field, and nothing stored.
    oversized = httpx.post(
        f"{web}/api/v1/actions/",
        json={"service": "rm", "request": {"input_ids": [list(range(65))]}},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )
    assert oversized.status_code == 400, oversized.text
    assert oversized.json()["errors"][0]["field"] == "request.input_ids[0]"

    # One batch: both placed in one pass, each on its own device, each restored there.
    first = _submit(
        web, key, [{"service": "rm", "request": REWARD}, {"service": "teacher", "request": TEACHER}]
    )
    _wait(_ended(first), 120, "the first actions ended", cluster)
    rm, teacher = (Action.objects.get(pk=pk) for pk in first)
    assert (rm.status, teacher.status) == ("succeeded", "succeeded"), (
        rm.error_reason,
        teacher.error_reason,
        cluster.logs(),
    )
    scores = json.loads(rm.output)["scores"]
    assert len(scores) == 2 and all(isinstance(score, float) for score in scores)
    (logprobs,) = json.loads(teacher.output)["logprobs"]
    assert len(logprobs) == 3 and all(value <= 0 for value in logprobs)
    placed = {"rm": _gpus(rm), "teacher": _gpus(teacher)}
    assert sorted(placed.values()) == [[0], [1]], placed
    # Each agent's report is stored with its action: where the time went, and the cold start.
    for action in (rm, teacher):
        assert action.service_timings is not None
        assert set(action.service_timings) == {"queue_s", "restore_s", "execute_s"}
        assert action.service_timings["restore_s"] > 0 and action.service_timings["execute_s"] > 0
        assert action.cache_events and action.cache_events[-1]["kind"] in ("load", "restore")
        assert action.cache_events[-1]["start"] == _gpus(action)[0]

    # The heartbeat that reported the new cache was stored with the node (§5.3).
    _wait(lambda: len(_stored_cache(node)) == 2, 30, "the cache stored with the node", cluster)
    warm = _stored_cache(node)
    assert warm == {name: gpus[0] for name, gpus in placed.items()}

    cluster.kill("scheduler")
    # Submitted while no scheduler runs, in the other order: without the cache a rebuilt
    # scheduler would hand the first free device to the first action.
    second = _submit(
        web, key, [{"service": "teacher", "request": TEACHER}, {"service": "rm", "request": REWARD}]
    )
    cluster.start_scheduler()
    _wait(_ended(second), 120, "the actions after the restart ended", cluster)
    for action in Action.objects.filter(pk__in=second).select_related("service"):
        assert action.status == "succeeded", (action.error_reason, cluster.logs())
        assert action.service is not None
        assert _gpus(action) == [warm[action.service.name]], action.allocation
    assert _stored_cache(node) == warm


def test_a_gpu_agent_killed_mid_request_is_retried_elsewhere_then_agent_lost(
    gpu_cluster: Cluster,
):
    """A service request is idempotent (a pure function of its input): its agent SIGKILLed
    mid-request, it runs again on the other node; that one killed too, with its attempts spent,
    it fails ``agent_lost``."""
    from workers.agents.gpu.checkpoints import create_checkpoint  # torch: only when it runs

    cluster = gpu_cluster
    pool = cluster.pool
    # Big enough that one request takes seconds on a CPU stand-in: it is seen running.
    checkpoint = create_checkpoint(
        cluster.work / "big-rm", "reward", hidden_size=256, layers=6, max_positions=2048
    )
    Service.objects.create(
        name="big-rm", pool_id=PoolFactory.create(name=pool).pk, backend="torch", model="big-rm"
    )
    nodes = [f"{pool}-a", f"{pool}-b"]
    cluster.start_scheduler(max_attempts=2, heartbeat_timeout=1.5)
    for node in nodes:
        cluster.start_gpu_agent(
            node, [f"big-rm=torch:reward:{checkpoint}"], devices=1, write_checkpoints=False
        )
    _wait(
        lambda: Node.objects.filter(name__in=nodes, gpus=1, status="online").count() == 2,
        120,
        "both GPU agents registered",
        cluster,
    )
    service = Service.objects.get(name="big-rm")
    # Token ids inside the checkpoint's vocabulary (512), 1999 per sequence.
    request = {"input_ids": [[1 + token % 500 for token in range(1999)]] * 64}
    action = action_submit(
        job=JobFactory.create(),
        spec=ActionSpec(
            demand=parse_demand({"gpu": 1}),
            service_id=service.pk,
            pool_id=service.pool_id,
            request=request,
        ),
    ).action
    placements: list[str] = []
    for attempt in (1, 2):

        def running(attempt: int = attempt) -> bool:
            row = Action.objects.select_related("node").get(pk=action.pk)
            return row.status == "running" and row.attempts == attempt and row.node is not None

        _wait(running, 120, f"attempt {attempt} running", cluster)
        row = Action.objects.select_related("node").get(pk=action.pk)
        assert row.node is not None
        placements.append(row.node.name)
        cluster.kill(row.node.name)  # SIGKILL the agent running it, mid-request
    assert placements[0] != placements[1], "the retry must go to the other node"
    _wait(_ended([action.pk]), 60, "the action ended", cluster)
    row = Action.objects.get(pk=action.pk)
    assert (row.status, row.attempts) == ("failed", 2), cluster.logs()
    assert row.error_reason.startswith("agent_lost"), row.error_reason


def test_a_service_whose_weights_do_not_load_fails_its_actions_with_the_reason(
    gpu_cluster: Cluster,
):
    """The agent registers the service with its load error; the pool then has no node that can
    run it, so its action ends failed with a reason instead of waiting forever, and the other
    service on the same node still runs."""
    from workers.agents.gpu.checkpoints import create_checkpoint  # torch: only when it runs

    cluster = gpu_cluster
    pool = cluster.pool
    node = f"{pool}-g1"
    pool_id = PoolFactory.create(name=pool).pk
    for name in ("rm", "broken"):
        Service.objects.create(name=name, pool_id=pool_id, backend="torch", model=name)
    rm = create_checkpoint(cluster.work / "rm", "reward")
    broken = create_checkpoint(cluster.work / "broken", "reward")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    key = make_key(job=JobFactory.create())[1]
    web = cluster.start_web()
    cluster.start_scheduler()
    cluster.start_gpu_agent(
        node,
        [f"rm=torch:reward:{rm}", f"broken=torch:reward:{broken}"],
        write_checkpoints=False,
    )

    def registered() -> bool:
        capacity = Node.objects.filter(name=node).values_list("capacity", flat=True).first()
        return capacity is not None and "broken" in capacity.get("services", {})

    _wait(registered, 120, "the GPU agent registered", cluster)
    assert "error" in Node.objects.get(name=node).capacity["services"]["broken"]
    ids = _submit(
        web, key, [{"service": "broken", "request": REWARD}, {"service": "rm", "request": REWARD}]
    )
    _wait(_ended(ids), 120, "both actions ended", cluster)
    failed, succeeded = (Action.objects.get(pk=pk) for pk in ids)
    assert (failed.status, succeeded.status) == ("failed", "succeeded"), cluster.logs()
    assert "failed to load" in failed.error_reason, failed.error_reason  # why, by name
    assert failed.allocation is None  # it never held a chunk
