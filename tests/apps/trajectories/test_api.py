from __future__ import annotations

import pytest

from tests.apps.helpers import error_fields
from tests.factories import TrajectoryFactory

pytestmark = pytest.mark.django_db


def test_create_update_list(job_actor):
    created = job_actor.client.post(
        "/api/v1/trajectories/",
        {"training_step": 3, "prompt_id": "p1", "group_id": "g1", "sample_index": 2},
        format="json",
    )
    assert created.status_code == 201, created.json()
    trajectory = created.json()
    assert trajectory["job"] == job_actor.job.pk and trajectory["status"] == "pending"
    url = f"/api/v1/trajectories/{trajectory['id']}/"
    updated = job_actor.client.patch(
        url,
        {"status": "generating", "tokens": 512, "steps": 1, "predicted_remaining_tokens": 900},
        format="json",
    )
    assert updated.status_code == 200 and updated.json()["tokens"] == 512
    done = job_actor.client.patch(url, {"status": "finished", "reward": 1.0}, format="json")
    assert done.json()["finished_at"] is not None
    listed = job_actor.client.get("/api/v1/trajectories/", {"status": "finished"}).json()
    assert [item["id"] for item in listed["results"]] == [trajectory["id"]]
    assert (
        job_actor.client.get("/api/v1/trajectories/", {"training_step": 4}).json()["results"] == []
    )


def test_progress_cannot_go_backwards(job_actor):
    trajectory = TrajectoryFactory.create(job=job_actor.job, tokens=100, steps=2)
    url = f"/api/v1/trajectories/{trajectory.pk}/"
    response = job_actor.client.patch(url, {"tokens": 50}, format="json")
    assert response.status_code == 400
    assert "must not decrease (was 100)" in error_fields(response)["tokens"]


def test_ended_trajectory_is_409(job_actor):
    trajectory = TrajectoryFactory.create(job=job_actor.job, status="finished")
    url = f"/api/v1/trajectories/{trajectory.pk}/"
    response = job_actor.client.patch(url, {"status": "generating"}, format="json")
    assert response.status_code == 409 and "status" in error_fields(response)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"status": "flying"}, "status"),
        ({"tokens": -1}, "tokens"),
        ({"generation_s": "inf"}, "generation_s"),
        ({"reward": "nan"}, "reward"),
    ],
)
def test_bad_updates(job_actor, payload, field):
    trajectory = TrajectoryFactory.create(job=job_actor.job)
    response = job_actor.client.patch(
        f"/api/v1/trajectories/{trajectory.pk}/", payload, format="json"
    )
    assert response.status_code == 400 and field in error_fields(response)


def test_other_jobs_trajectories_are_invisible(job_actor, other_actor):
    foreign = TrajectoryFactory.create(job=other_actor.job)
    assert job_actor.client.get(f"/api/v1/trajectories/{foreign.pk}/").status_code == 404
    response = job_actor.client.patch(
        f"/api/v1/trajectories/{foreign.pk}/", {"tokens": 1}, format="json"
    )
    assert response.status_code == 404
    assert job_actor.client.get("/api/v1/trajectories/").json()["results"] == []
