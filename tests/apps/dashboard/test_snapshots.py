from typing import Any

import pytest

from apps.dashboard.live.snapshots import job_snapshot, node_view
from apps.metrics.measures import pool_snapshot
from tests.apps.dashboard.conftest import finished_action, running_action


def test_pool_snapshot_counts_ages_act_and_utilisation(cpu_node: Any, job: Any) -> None:
    from tests.factories import ActionFactory

    pool = cpu_node.pool
    for act_s in (1.0, 2.0, 3.0, 10.0):
        finished_action(job, pool, act_s=act_s)
    running_action(job, pool, cpu_node, cores=[0, 1, 2])
    ActionFactory(job=job, pool=pool)  # queued
    snapshot = pool_snapshot(pool)
    assert (snapshot["waiting"], snapshot["running"]) == (1, 1)
    assert snapshot["oldest_wait_s"] >= 0
    assert snapshot["act"]["n"] == 4
    assert snapshot["act"]["p50"] == pytest.approx(2.5, abs=0.01)
    assert snapshot["act"]["mean"] == pytest.approx(4.0, abs=0.01)
    assert snapshot["util"]["cpu"] == pytest.approx(3 / 4)
    assert snapshot["util"]["gpu"] is None  # no GPUs in the pool


def test_node_view_lists_who_holds_which_core(cpu_node: Any, job: Any) -> None:
    action = running_action(job, cpu_node.pool, cpu_node, cores=[1, 3])
    view = node_view(cpu_node)
    assert view["allocations"] == [
        {"action": action.pk, "job": job.pk, "cores": [1, 3], "gpus": []}
    ]
    assert (view["cores_used"], view["cores_total"], view["draining"]) == (2, 4, False)
    assert view["heartbeat_age_s"] is not None and view["heartbeat_age_s"] < 60


def test_job_snapshot_counts_by_status(cpu_pool: Any, job: Any) -> None:
    from tests.factories import ActionFactory, TrajectoryFactory

    ActionFactory.create_batch(2, job=job, pool=cpu_pool)
    finished_action(job, cpu_pool, act_s=4.0)
    TrajectoryFactory(job=job)
    snapshot = job_snapshot(job)
    assert snapshot["counts"]["queued"] == 2 and snapshot["counts"]["succeeded"] == 1
    assert snapshot["act"]["p50"] == pytest.approx(4.0, abs=0.01)
    assert snapshot["active_trajectories"] == 1


def test_live_job_counts_keep_active_counts_exact_between_full_counts(
    cpu_pool: Any, job: Any
) -> None:
    from apps.dashboard.live.snapshots import live_job_counts
    from tests.factories import ActionFactory

    ActionFactory(job=job, pool=cpu_pool)
    assert live_job_counts(job)["queued"] == 1
    ActionFactory(job=job, pool=cpu_pool)
    finished_action(job, cpu_pool, act_s=1.0)
    counts = live_job_counts(job)
    assert counts["queued"] == 2  # active: exact at once
    assert counts["succeeded"] == 0  # ended: refreshed at most every TERMINAL_COUNTS_TTL_S
