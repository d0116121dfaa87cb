"""The dashboard's JSON endpoints: roles, shapes, filters, wait reasons, writes."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.actions.models import ActionStatus
from apps.resources.models import NodeStatus
from tests.apps.dashboard.conftest import finished_action, running_action

API = "/dashboard/api"


def test_every_read_endpoint_needs_a_role(client: Any, roleless_user: Any, cpu_pool: Any) -> None:
    assert client.get(f"{API}/overview").status_code == 403  # anonymous (session auth → 403)
    client.force_login(roleless_user)
    assert client.get(f"{API}/overview").status_code == 403
    assert client.get(f"{API}/me").json() == {"username": "nobody", "role": "none"}


def test_overview_lists_every_pool_with_live_numbers(
    operator_client: Any, cpu_node: Any, job: Any
) -> None:
    from tests.factories import ActionFactory, PoolFactory

    PoolFactory(name="gpu", kind="gpu")
    ActionFactory.create_batch(3, job=job, pool=cpu_node.pool)
    body = operator_client.get(f"{API}/overview").json()
    pools = {p["pool"]: p for p in body["pools"]}
    assert set(pools) == {"cpu", "gpu"}
    assert pools["cpu"]["waiting"] == 3 and pools["gpu"]["waiting"] == 0
    assert body["history"] == {"cpu": [], "gpu": []}


def test_pool_page_shows_nodes_and_allocations(
    operator_client: Any, cpu_node: Any, job: Any
) -> None:
    running_action(job, cpu_node.pool, cpu_node, cores=[0])
    body = operator_client.get(f"{API}/pools/cpu").json()
    assert body["pool"]["running"] == 1
    assert body["nodes"][0]["name"] == "node-a" and body["nodes"][0]["cores_used"] == 1
    assert operator_client.get(f"{API}/pools/nope").status_code == 404


def test_job_actions_filters_paginates_and_explains_waits(
    operator_client: Any, cpu_node: Any, job: Any
) -> None:
    from tests.factories import ActionFactory

    pool = cpu_node.pool
    running_action(job, pool, cpu_node, cores=[0, 1, 2, 3])  # the node is full
    queued = ActionFactory.create_batch(3, job=job, pool=pool)
    finished_action(job, pool, act_s=2.0)
    page = operator_client.get(
        f"{API}/jobs/{job.pk}/actions", {"status": "queued", "limit": 2}
    ).json()
    assert page["total"] == 3 and len(page["results"]) == 2 and page["next"]
    assert {row["status"] for row in page["results"]} == {"queued"}
    assert all(
        row["wait_reason"] == "no cores free: needs 1, 0 of 4 free" for row in page["results"]
    )
    rest = operator_client.get(
        f"{API}/jobs/{job.pk}/actions", {"status": "queued", "cursor": page["next"]}
    ).json()
    assert [r["id"] for r in page["results"] + rest["results"]] == sorted(
        (a.pk for a in queued), reverse=True
    )
    bad = operator_client.get(f"{API}/jobs/{job.pk}/actions", {"status": "sleeping"})
    assert bad.status_code == 400
    assert bad.json()["errors"] == [{"field": "status", "reason": "unknown status 'sleeping'"}]


def test_job_actions_query_count_does_not_grow_with_the_page(
    operator_client: Any, cpu_node: Any, job: Any
) -> None:
    from tests.factories import ActionFactory

    def count_queries() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert operator_client.get(f"{API}/jobs/{job.pk}/actions").status_code == 200
        return len(queries)

    ActionFactory.create_batch(2, job=job, pool=cpu_node.pool)
    few = count_queries()
    ActionFactory.create_batch(30, job=job, pool=cpu_node.pool)
    assert count_queries() == few


def test_job_page_has_the_act_breakdown(operator_client: Any, cpu_pool: Any, job: Any) -> None:
    finished_action(job, cpu_pool, act_s=3.0, exec_s=1.0)
    body = operator_client.get(f"{API}/jobs/{job.pk}").json()
    breakdown = body["act_breakdown"]
    assert breakdown["n"] == 1
    assert breakdown["queueing"]["mean"] == pytest.approx(2.0, abs=0.01)
    assert breakdown["execution"]["mean"] == pytest.approx(1.0, abs=0.01)
    assert body["job"]["counts"]["succeeded"] == 1


def test_action_page_bounds_the_output_tail(operator_client: Any, cpu_pool: Any, job: Any) -> None:
    from apps.dashboard.selectors import OUTPUT_TAIL_BYTES

    output = "".join(f"line {i}\n" for i in range(200_000))  # ≈ 1.7 MB
    action = finished_action(job, cpu_pool, act_s=1.0, output=output)
    body = operator_client.get(f"{API}/actions/{action.pk}").json()
    assert body["output_truncated"] is True
    assert body["output_bytes"] == len(output)
    assert len(body["output_tail"].encode()) <= OUTPUT_TAIL_BYTES
    assert body["output_tail"].endswith("line 199999\n")
    assert body["output_tail"].startswith("line ")  # cut at a line boundary
    assert body["can_cancel"] is False


def test_cancel_needs_the_admin_role_and_only_cancels_once(
    operator_client: Any, admin_client: Any, cpu_pool: Any, job: Any
) -> None:
    from tests.factories import ActionFactory

    action: Any = ActionFactory(job=job, pool=cpu_pool)
    refused = operator_client.post(f"{API}/actions/{action.pk}/cancel")
    assert refused.status_code == 403
    action.refresh_from_db()
    assert action.status == ActionStatus.QUEUED
    done = admin_client.post(f"{API}/actions/{action.pk}/cancel")
    assert done.status_code == 200 and done.json()["status"] == "cancelled"
    assert "tuner" in done.json()["error"]
    again = admin_client.post(f"{API}/actions/{action.pk}/cancel")
    assert again.status_code == 409


def test_policy_changes_are_validated_versioned_and_diffed(
    admin_client: Any, operator_client: Any, cpu_pool: Any
) -> None:
    url = f"{API}/policies/cpu"
    bad = admin_client.post(
        url, {"settings": {"depth": 0, "min_dop": 8, "max_dop": 4, "x": 1}}, format="json"
    )
    assert bad.status_code == 400
    fields = {e["field"] for e in bad.json()["errors"]}
    assert fields == {"settings.depth", "settings.x"}
    swapped = admin_client.post(url, {"settings": {"min_dop": 8, "max_dop": 4}}, format="json")
    assert swapped.json()["errors"] == [
        {"field": "settings.max_dop", "reason": "must be ≥ min_dop (8)"}
    ]
    first = admin_client.post(url, {"settings": {"depth": 2}}, format="json")
    assert first.status_code == 201 and first.json()["current"]["version"] == 1
    second = admin_client.post(
        url, {"settings": {"depth": 4, "algorithm": "fcfs-min"}}, format="json"
    )
    body = second.json()
    assert body["current"]["version"] == 2
    latest = body["versions"][0]
    assert latest["author"] == "tuner"
    assert {(d["field"], d["old"], d["new"]) for d in latest["diff"]} == {
        ("depth", 2, 4),
        ("algorithm", "elastic", "fcfs-min"),
    }
    assert operator_client.post(url, {"settings": {"depth": 5}}, format="json").status_code == 403
    listing = operator_client.get(f"{API}/policies").json()
    assert [f["name"] for f in listing["fields"]][:2] == ["algorithm", "depth"]
    assert listing["pools"][0]["current"]["settings"]["depth"] == 4


def test_api_quotas_in_a_policy_are_validated(admin_client: Any, cpu_pool: Any) -> None:
    url = f"{API}/policies/cpu"
    for quotas, fragment in [
        ({"my-job": {"cpu": 3}}, "not an API resource"),
        ({"api:search": {"concurrency": -1}}, "≥ 0"),
        ({"api:search": {"period_s": 10}}, "needs a concurrency or a quota"),
        ({"api:search": {"quota": 5, "burst": 2}}, "not a limit"),
    ]:
        bad = admin_client.post(url, {"settings": {"quotas": quotas}}, format="json")
        assert bad.status_code == 400
        [error] = bad.json()["errors"]
        assert error["field"] == "settings.quotas" and fragment in error["reason"]
    good = {"api:search": {"concurrency": 16, "quota": 600, "period_s": 60}}
    ok = admin_client.post(url, {"settings": {"quotas": good}}, format="json")
    assert ok.status_code == 201 and ok.json()["current"]["settings"]["quotas"] == good


def test_drain_and_resume_a_node(admin_client: Any, operator_client: Any, cpu_node: Any) -> None:
    assert operator_client.post(f"{API}/nodes/{cpu_node.pk}/drain").status_code == 403
    drained = admin_client.post(f"{API}/nodes/{cpu_node.pk}/drain")
    assert drained.status_code == 200 and drained.json()["draining"] is True
    cpu_node.refresh_from_db()
    assert cpu_node.status == NodeStatus.DRAINING
    resumed = admin_client.post(f"{API}/nodes/{cpu_node.pk}/resume").json()
    assert resumed["status"] == "online"
    cpu_node.status = NodeStatus.OFFLINE
    cpu_node.save()
    assert admin_client.post(f"{API}/nodes/{cpu_node.pk}/drain").status_code == 409


def test_launch_demo_submits_real_actions(
    admin_client: Any, operator_client: Any, cpu_pool: Any
) -> None:
    from apps.actions.models import Action

    body = {"pool": "cpu", "count": 25, "duration_s": 0.5, "seed": 7}
    assert operator_client.post(f"{API}/launch/demo", body, format="json").status_code == 403
    response = admin_client.post(f"{API}/launch/demo", body, format="json")
    assert response.status_code == 201 and response.json()["submitted"] == 25
    actions = Action.objects.filter(job_id=response.json()["job"])
    assert actions.count() == 25
    assert {a.status for a in actions} == {"queued"}
    # a stand-in that honours its elasticity: it sleeps T1 / (E(m)·m) on the {dop} cores granted
    assert all(a.pool_id == cpu_pool.pk and "{dop}" in a.command for a in actions)
    assert all("sleep" in a.command for a in actions)
    too_many = admin_client.post(f"{API}/launch/demo", {**body, "count": 10**6}, format="json")
    assert too_many.json()["errors"][0]["field"] == "count"


def test_launch_demo_refuses_pools_that_do_not_run_commands(admin_client: Any, db: Any) -> None:
    from tests.factories import PoolFactory

    PoolFactory.create(name="web-apis", kind="api")
    body = {"pool": "web-apis", "count": 5, "duration_s": 0.5}
    response = admin_client.post(f"{API}/launch/demo", body, format="json")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "pool"


def test_simulation_input_is_validated(admin_client: Any, operator_client: Any, db: Any) -> None:
    bad = admin_client.post(
        f"{API}/launch/simulate",
        {"trace": {"kind": "generated", "count": 0, "rate": 5}, "policies": [{"depth": 0}]},
        format="json",
    )
    assert bad.status_code == 400
    assert {e["field"] for e in bad.json()["errors"]} == {"trace.count", "policies[0].depth"}
    refused = operator_client.post(
        f"{API}/launch/simulate",
        {"trace": {"kind": "generated", "count": 5, "rate": 1}, "policies": [{}]},
        format="json",
    )
    assert refused.status_code == 403


def test_simulation_replays_a_generated_trace_under_two_policies(
    admin_client: Any, django_capture_on_commit_callbacks: Any
) -> None:
    body = {
        "trace": {"kind": "generated", "count": 12, "rate": 10, "seed": 3, "cores_per_node": 8},
        "policies": [{"algorithm": "elastic", "depth": 2}, {"algorithm": "fcfs-min"}],
    }
    with django_capture_on_commit_callbacks(execute=True):
        created = admin_client.post(f"{API}/launch/simulate", body, format="json")
    assert created.status_code == 201
    run = admin_client.get(f"{API}/launch/simulations/{created.json()['id']}").json()
    assert run["status"] == "succeeded", run["error"]
    elastic, fcfs = run["result"]["policies"]
    assert elastic["label"].startswith("A: elastic") and fcfs["label"].startswith("B: fcfs-min")
    assert elastic["act"]["n"] == fcfs["act"]["n"] > 12  # every action of every trajectory
    assert elastic["act"]["mean"] > 0 and fcfs["makespan_s"] > 0
    fractions = [point[1] for point in elastic["act_cdf"]]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0


def test_simulation_replays_a_recorded_job(
    admin_client: Any, cpu_pool: Any, job: Any, django_capture_on_commit_callbacks: Any
) -> None:
    for act_s in (1.0, 2.0, 3.0):
        finished_action(job, cpu_pool, act_s=act_s, exec_s=0.5)
    body = {"trace": {"kind": "recorded", "job": job.pk}, "policies": [{}]}
    with django_capture_on_commit_callbacks(execute=True):
        created = admin_client.post(f"{API}/launch/simulate", body, format="json")
    run = admin_client.get(f"{API}/launch/simulations/{created.json()['id']}").json()
    assert run["status"] == "succeeded", run["error"]
    assert run["result"]["policies"][0]["act"]["n"] == 3
