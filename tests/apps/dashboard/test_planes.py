"""The GPU map, buffer and Rollouts endpoints: what an operator sees, bad input, roles, queries."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.actions.models import ActionStatus
from tests.apps.dashboard.plane_data import (
    allocated,
    buffer_with_history,
    finished,
    gpu_action,
    gpu_cluster,
    rollout,
)

API = "/dashboard/api"


# --- GPU map ---------------------------------------------------------------------------------


def test_gpu_map_shows_chunks_services_queues_and_act(operator_client: Any) -> None:
    cluster = gpu_cluster()
    running = allocated(cluster, "reward", [0, 1])
    cold = allocated(cluster, "teacher", [3])
    for _ in range(3):
        gpu_action(cluster, "reward", ActionStatus.QUEUED)
    cold_start = {"queue_s": 0.1, "restore_s": 0.5, "execute_s": 1.0}
    restored = [{"kind": "restore", "service": "reward", "start": 0, "size": 2, "at": 1.0}]
    finished(cluster, "reward", 2.0, service_timings=cold_start, cache_events=restored)
    # warm: the agent still times its (empty) restore step
    finished(cluster, "reward", 4.0, service_timings=cold_start | {"restore_s": 0.00001})

    body = operator_client.get(f"{API}/gpus").json()
    assert body["pools"] == ["gpu"]
    (node,) = body["nodes"]
    assert node["name"] == "gpu-a" and node["nvlink_groups"] == [[0, 1, 2, 3]]
    cells = {cell["index"]: cell for cell in node["cells"]}
    assert [cells[i]["state"] for i in range(4)] == ["busy", "busy", "warm", "restoring"]
    assert cells[0]["action"] == running.pk and cells[3]["action"] == cold.pk
    assert cells[2]["warm"] == ["teacher"]
    assert [(i["service"], i["start"], i["size"]) for i in node["cache"]] == [
        ("teacher", 2, 1),  # least recently used first
        ("reward", 0, 2),
    ]
    assert node["hosted"]["judge"] == {"error": "weights missing"}
    services = {s["name"]: s for s in body["services"]}
    reward = services["reward"]
    assert (reward["queued"], reward["running"], reward["act"]["n"]) == (3, 1, 2)
    assert reward["act"]["mean"] == pytest.approx(3.0, abs=0.01)
    assert reward["queueing_mean_s"] == pytest.approx(1.5, abs=0.01)
    assert reward["warm"] == [{"node": "gpu-a", "start": 0, "size": 2}]
    assert reward["agent"] == {
        "reported": 2,
        "restores": 1,  # the warm one restored nothing
        "restore_mean_s": 0.5,
        "agent_queue_mean_s": pytest.approx(0.1),
        "execute_mean_s": pytest.approx(1.0),
    }
    assert services["judge"]["load_failures"] == {"gpu-a": "weights missing"}
    assert services["teacher"]["running"] == 1 and services["teacher"]["act"]["n"] == 0
    assert any("restoring" in line for line in body["missing"])  # said, not invented


def test_gpu_map_filters_by_pool_and_names_bad_input(operator_client: Any) -> None:
    from tests.factories import PoolFactory

    gpu_cluster()
    PoolFactory(name="cpu")
    assert operator_client.get(f"{API}/gpus", {"pool": "gpu"}).json()["pools"] == ["gpu"]
    for params, field in (
        ({"pool": "cpu"}, "pool"),  # exists, but holds no GPUs
        ({"pool": "nope"}, "pool"),
        ({"pool": "bad name!"}, "pool"),
        ({"pol": "gpu"}, "pol"),
    ):
        response = operator_client.get(f"{API}/gpus", params)
        assert response.status_code == 400, params
        assert [e["field"] for e in response.json()["errors"]] == [field]


def test_gpu_map_query_count_does_not_grow_with_actions(operator_client: Any) -> None:
    cluster = gpu_cluster()

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(f"{API}/gpus").status_code == 200
        return len(queries)

    allocated(cluster, "reward", [0])
    count_queries()  # first-use caches (content types, permissions) warmed
    before = count_queries()
    for gpu in (1, 2, 3):
        allocated(cluster, "teacher", [gpu])
    for _ in range(5):
        gpu_action(cluster, "reward", ActionStatus.QUEUED)
        finished(cluster, "teacher", 1.0)
    assert count_queries() == before


def test_gpu_map_without_gpu_nodes_is_empty_not_an_error(operator_client: Any) -> None:
    from tests.factories import PoolFactory

    PoolFactory(name="gpu", kind="gpu")
    body = operator_client.get(f"{API}/gpus").json()
    assert body["nodes"] == [] and body["services"] == []


def test_gpu_map_survives_a_malformed_stored_cache(operator_client: Any) -> None:
    cluster = gpu_cluster()
    node = cluster["node"]
    node.capacity = {**node.capacity, "cache": [{"service": "reward"}, "junk", {"start": 1}]}
    node.save()
    body = operator_client.get(f"{API}/gpus").json()
    assert body["nodes"][0]["cache"] == []
    assert {c["state"] for c in body["nodes"][0]["cells"]} == {"free"}


# --- buffers ---------------------------------------------------------------------------------


def test_buffer_list_and_page_show_fill_triggers_and_history(
    operator_client: Any, job: Any
) -> None:
    from tests.factories import BufferFactory

    buffer = buffer_with_history(job)
    empty: Any = BufferFactory(job=job, name="replay", capacity=10)
    listing = operator_client.get(f"{API}/buffers").json()["buffers"]
    rows = {row["name"]: row for row in listing}
    assert rows["rollout"]["latest"]["held"] == 60 and rows["rollout"]["latest"]["fill"] == 0.6
    assert rows["replay"]["latest"] is None
    assert rows["rollout"]["job"] == {"id": job.pk, "name": job.name}

    body = operator_client.get(f"{API}/buffers/{buffer.pk}").json()
    assert body["buffer"]["name"] == "rollout" and body["buffer"]["schema"] == buffer.schema
    assert [s["held"] for s in body["history"]] == [0, 20, 40, 60]  # oldest first
    assert {t["name"]: t["firings"] for t in body["triggers"]} == {"batch": 9, "tick": 3}
    assert body["snapshot_age_s"] == pytest.approx(30, abs=5)
    assert body["missing"] == []
    actors = {a["actor"]: a for a in body["actors"]}
    assert (actors["actor0"]["state"], actors["actor0"]["restored"]) == ("prewarmed", 11)
    assert (actors["actor1"]["workflow"], actors["actor1"]["startup_wait_p99_s"]) == ("ppo", 0.3)
    assert [
        s["held"]
        for s in operator_client.get(f"{API}/buffers/{buffer.pk}", {"limit": 2}).json()["history"]
    ] == [40, 60]
    assert operator_client.get(f"{API}/buffers/{empty.pk}").json()["history"] == []


def test_buffer_endpoints_name_bad_input_and_unknown_ids(operator_client: Any, job: Any) -> None:
    buffer = buffer_with_history(job)
    assert operator_client.get(f"{API}/buffers/999999").status_code == 404
    for path, params, field in (
        ("buffers", {"job": "abc"}, "job"),
        ("buffers", {"job": "999999"}, "job"),
        ("buffers", {"job": "0"}, "job"),
        (f"buffers/{buffer.pk}", {"limit": "0"}, "limit"),
        (f"buffers/{buffer.pk}", {"limit": "many"}, "limit"),
        (f"buffers/{buffer.pk}", {"since": "x"}, "since"),
    ):
        response = operator_client.get(f"{API}/{path}", params)
        assert response.status_code == 400, (path, params)
        assert [e["field"] for e in response.json()["errors"]] == [field]
    assert len(operator_client.get(f"{API}/buffers", {"job": job.pk}).json()["buffers"]) == 1


def test_buffer_list_query_count_does_not_grow_with_buffers(operator_client: Any, job: Any) -> None:
    from tests.factories import BufferFactory

    buffer_with_history(job)

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(f"{API}/buffers").status_code == 200
        return len(queries)

    count_queries()  # first-use caches (content types, permissions) warmed
    before = count_queries()
    BufferFactory.create_batch(4, job=job)
    assert count_queries() == before


def test_buffer_page_query_count_does_not_grow_with_actors_or_snapshots(
    operator_client: Any, job: Any
) -> None:
    from apps.buffers.models import BufferActorState
    from tests.apps.dashboard.plane_data import buffer_actors

    buffer = buffer_with_history(job)

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(f"{API}/buffers/{buffer.pk}").status_code == 200
        return len(queries)

    count_queries()
    before = count_queries()
    BufferActorState.objects.filter(buffer=buffer).update(workflow="sac")
    buffer_actors(buffer)  # two more actors, of another workflow
    assert count_queries() == before
    assert len(operator_client.get(f"{API}/buffers/{buffer.pk}").json()["actors"]) == 4


# --- rollouts --------------------------------------------------------------------------------


def test_rollouts_show_workers_trajectories_and_groups(operator_client: Any, job: Any) -> None:
    made = rollout(job)
    body = operator_client.get(f"{API}/rollouts").json()
    assert [t["id"] for t in body["trajectories"]] == [
        made[name].pk for name in ("long", "other", "short", "waiting")
    ]  # the long tail first; ended ones left out
    workers = {w["name"]: w for w in body["workers"]}
    assert workers["w0"].items() >= {
        "name": "w0", "trajectories": 2, "generating": 1, "tool_call": 1, "pending": 0,
        "tokens": 150, "predicted_remaining_tokens": 1000,
    }.items()  # fmt: skip
    assert workers["w0"]["kv_usage"] is None  # no router reported its workers
    assert workers["w1"]["trajectories"] == 1  # its finished and aborted ones no longer load it
    assert body["unplaced"] == 1
    assert body["counts"]["aborted"] == 1 and body["counts"]["generating"] == 2
    (group,) = body["groups"]
    assert (group["samples"], group["finished"], group["pruned"], group["running"]) == (4, 1, 1, 2)
    long_row = body["trajectories"][0]
    assert (long_row["worker"], long_row["predicted_remaining_tokens"]) == ("w0", 900)
    # No Redis in these settings: the router-only fields are not reported, not made up.
    assert body["router_fields"] is False and long_row["priority"] is None
    assert body["router_groups"] is None
    assert any("KV" in line for line in body["missing"])
    buckets = body["remaining_histogram"]  # the three active ones with a prediction
    assert sum(b["count"] for b in buckets) == 3
    assert (buckets[0]["lo"], buckets[-1]["hi"]) == (100, 900)

    finished_rows = operator_client.get(f"{API}/rollouts", {"status": "finished"}).json()
    assert [t["id"] for t in finished_rows["trajectories"]] == [made["kept"].pk]


def test_rollouts_count_ended_trajectories_at_most_ttl_late_and_active_ones_exactly(
    operator_client: Any, job: Any, monkeypatch: Any
) -> None:
    from apps.dashboard import selectors_rollouts
    from apps.trajectories.models import Trajectory

    made = rollout(job)
    assert operator_client.get(f"{API}/rollouts").json()["counts"]["finished"] == 1
    Trajectory.objects.filter(pk=made["other"].pk).update(status="finished")
    counts = operator_client.get(f"{API}/rollouts").json()["counts"]
    assert (counts["generating"], counts["finished"]) == (1, 1)  # the ended count is cached
    monkeypatch.setattr(selectors_rollouts, "ENDED_COUNTS_TTL_S", 0.0)
    assert operator_client.get(f"{API}/rollouts").json()["counts"]["finished"] == 2


def test_rollouts_show_the_newest_groups_counted_in_full(
    operator_client: Any, job: Any, monkeypatch: Any
) -> None:
    from apps.dashboard import selectors_rollouts
    from tests.factories import TrajectoryFactory

    monkeypatch.setattr(selectors_rollouts, "GROUP_LIMIT", 2)
    monkeypatch.setattr(selectors_rollouts, "GROUP_WINDOW", 3)
    for step, group in ((1, "old"), (2, "a"), (2, "b"), (2, "a"), (3, "c"), (3, "c")):
        TrajectoryFactory(job=job, training_step=step, group_id=group, status="finished")
    rows = operator_client.get(f"{API}/rollouts").json()["groups"]
    # The newest three grouped trajectories name groups c and a; a is counted in full (2).
    shown = [(g["training_step"], g["group"], g["samples"]) for g in rows]
    assert shown == [(3, "c", 2), (2, "a", 2)]


def test_rollouts_filter_by_job_and_name_bad_input(operator_client: Any, job: Any) -> None:
    from tests.factories import JobFactory, TrajectoryFactory

    rollout(job)
    other: Any = JobFactory(name="other")
    TrajectoryFactory(job=other, status="generating", llm_worker="w9")
    body = operator_client.get(f"{API}/rollouts", {"job": other.pk}).json()
    assert [w["name"] for w in body["workers"]] == ["w9"] and body["job"] == other.pk
    for params, field in (
        ({"job": "999999"}, "job"),
        ({"job": "x"}, "job"),
        ({"status": "sleeping"}, "status"),
        ({"limit": "0"}, "limit"),
        ({"limit": "100000"}, "limit"),
        ({"sort": "x"}, "sort"),
    ):
        response = operator_client.get(f"{API}/rollouts", params)
        assert response.status_code == 400, params
        assert [e["field"] for e in response.json()["errors"]] == [field]


def test_rollouts_query_count_does_not_grow_with_trajectories(
    operator_client: Any, job: Any
) -> None:
    from apps.dashboard import selectors_rollouts
    from tests.factories import TrajectoryFactory

    rollout(job)

    def count_queries() -> int:
        selectors_rollouts._ended_counts.clear()  # counted afresh each time
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(f"{API}/rollouts").status_code == 200
        return len(queries)

    count_queries()  # first-use caches (content types, permissions) warmed
    before = count_queries()
    for index in range(6):
        TrajectoryFactory(job=job, status="generating", llm_worker=f"w{index % 3}",
                          group_id=f"g{index}", predicted_remaining_tokens=index)  # fmt: skip
    assert count_queries() == before


@pytest.mark.redis
def test_rollouts_read_priority_and_migrations_from_the_router_stream(
    operator_client: Any, job: Any, router_names: Any, redis_url: str, monkeypatch: Any
) -> None:
    import redis

    from apps.dashboard import router_stream

    made = rollout(job)
    client = redis.Redis.from_url(redis_url)

    def publish(trajectory: int, priority: int, migrations: int) -> None:
        state = {"trajectory": str(trajectory), "job": str(job.pk),
                 "priority": priority, "migrations": migrations}  # fmt: skip
        client.xadd(router_names.trajectory_state, {"state": json.dumps(state)})

    publish(made["long"].pk, 1, 0)
    publish(made["long"].pk, 7, 2)  # the newest entry wins
    client.xadd(router_names.trajectory_state, {"state": "not json"})
    for _ in range(5):  # newer entries of a trajectory not on the page push it to later pages
        publish(999_999, 0, 0)
    monkeypatch.setattr(router_stream, "STATE_PAGE", 2)
    body = operator_client.get(f"{API}/rollouts").json()
    rows = {t["id"]: t for t in body["trajectories"]}
    assert body["router_fields"] is True
    assert (rows[made["long"].pk]["priority"], rows[made["long"].pk]["migrations"]) == (7, 2)
    assert rows[made["other"].pk]["priority"] is None  # nothing published for it
    monkeypatch.setattr(router_stream, "STATE_SCAN", 4)  # the scan stops before reaching it
    rows = {t["id"]: t for t in operator_client.get(f"{API}/rollouts").json()["trajectories"]}
    assert rows[made["long"].pk]["priority"] is None


@pytest.mark.redis
def test_rollouts_show_router_group_rollouts_from_the_stream(
    operator_client: Any, job: Any, router_names: Any, redis_url: str
) -> None:
    import redis

    from tests.factories import JobFactory

    other: Any = JobFactory(name="other")
    client = redis.Redis.from_url(redis_url)
    for trajectory, owner, status, at in (
        ("grp1/0/0", job, "finished", 10.0),
        ("grp1/0/1", job, "aborted", 11.0),  # pruned
        ("grp1/1/0", job, "generating", 12.0),
        ("grp1/1/0", job, "finished", 13.0),  # the newest state of a candidate wins
        ("grp1/1/1", job, "generating", 14.0),
        ("grp2/0/0", other, "generating", 20.0),
    ):
        state = {"trajectory": trajectory, "job": str(owner.pk), "status": status, "at": at}
        client.xadd(router_names.trajectory_state, {"state": json.dumps(state)})
    every = operator_client.get(f"{API}/rollouts").json()["router_groups"]
    assert [g["group"] for g in every] == ["grp2", "grp1"]  # most recently active first
    (mine,) = operator_client.get(f"{API}/rollouts", {"job": job.pk}).json()["router_groups"]
    assert mine == {"group": "grp1", "job": str(job.pk), "prompts": 2, "candidates": 4,
                    "running": 1, "finished": 2, "aborted": 1, "failed": 0, "at": 14.0}  # fmt: skip


def test_rollouts_with_an_unreachable_redis_say_not_reported(
    operator_client: Any, job: Any, settings: Any
) -> None:
    made = rollout(job)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    body = operator_client.get(f"{API}/rollouts").json()
    assert body["router_fields"] is False
    assert {t["id"] for t in body["trajectories"]} >= {made["long"].pk}


def test_new_endpoints_need_the_operator_role(client: Any, roleless_user: Any, job: Any) -> None:
    paths = ["gpus", "buffers", "rollouts"]
    for path in paths:
        assert client.get(f"{API}/{path}").status_code == 403
    client.force_login(roleless_user)
    for path in paths:
        assert client.get(f"{API}/{path}").status_code == 403
    for page in ("/gpus", "/buffers", "/buffers/1", "/rollouts"):
        assert client.get(page).status_code == 403  # the shell itself says "no role"


# --- live topics -----------------------------------------------------------------------------


def test_the_pages_topics_parse_authorize_and_carry_what_rest_answers(
    operator_user: Any, job: Any
) -> None:
    from apps.dashboard.live.access import topic_authorize
    from apps.dashboard.live.groups import InvalidTopic, TopicKind, topic_parse
    from apps.dashboard.live.snapshots import snapshot_for

    gpu_cluster()
    buffer = buffer_with_history(job)
    rollout(job)
    gpus, buffer_topic = topic_parse("gpus:gpu"), topic_parse(f"buffer:{buffer.pk}")
    everything, one_job = topic_parse("rollouts:all"), topic_parse(f"rollouts:{job.pk}")
    assert (gpus.kind, buffer_topic.kind, everything.kind) == (
        TopicKind.GPUS, TopicKind.BUFFER, TopicKind.ROLLOUTS,
    )  # fmt: skip
    for topic in (gpus, buffer_topic, everything, one_job):
        assert topic_authorize(operator_user, topic) is None
    for raw in ("rollouts:some", "buffer:x", "gpus:bad name!"):
        with pytest.raises(InvalidTopic):
            topic_parse(raw)
    for raw in ("gpus:nope", "buffer:999999", "rollouts:999999"):
        assert topic_authorize(operator_user, topic_parse(raw)) == f"not found: {raw}"

    gpu_payload = snapshot_for(gpus)
    assert gpu_payload is not None and gpu_payload["nodes"][0]["name"] == "gpu-a"
    buffer_payload = snapshot_for(buffer_topic)
    assert buffer_payload is not None and buffer_payload["history"][-1]["held"] == 60
    job_payload = snapshot_for(one_job)
    assert job_payload is not None and job_payload["job"] == job.pk
    assert len(job_payload["trajectories"]) == 4
    all_payload = snapshot_for(everything)
    assert all_payload is not None and all_payload["job"] is None


@pytest.mark.parametrize(
    ("path", "field", "status"),
    [
        ("buffers/99999999999999999999999", "buffer_id", 404),
        ("buffers?job=99999999999999999999999", "job", 400),
        ("rollouts?job=99999999999999999999999", "job", 400),
        ("rollouts?limit=99999999999999999999999", "limit", 400),
        ("rollouts?status=%00", "status", 400),
        ("gpus?pool=" + "a" * 300, "pool", 400),
    ],
)
def test_extreme_input_is_a_named_error_never_a_500(
    operator_client: Any, job: Any, path: str, field: str, status: int
) -> None:
    response = operator_client.get(f"{API}/{path}")
    assert response.status_code == status
    assert [e["field"] for e in response.json()["errors"]] == [field]
