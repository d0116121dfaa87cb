from __future__ import annotations

import pytest

from apps.policies.services import settings_diff
from tests.apps.helpers import error_fields

pytestmark = pytest.mark.django_db


def test_versions_record_who_changed_what(staff_actor):
    client = staff_actor.client
    created = client.post(
        "/api/v1/policies/",
        {"name": "cpu-sched", "kind": "action_scheduler", "settings": {"depth": 2, "min_dop": 2}},
        format="json",
    )
    assert created.status_code == 201, created.json()
    url = f"/api/v1/policies/{created.json()['id']}/"
    updated = client.patch(
        url,
        {"settings": {"depth": 3, "max_dop": 8}, "expected_version": 1, "comment": "deeper"},
        format="json",
    )
    assert updated.status_code == 200 and updated.json()["version"] == 2
    versions = client.get(f"{url}versions/").json()
    assert [v["version"] for v in versions] == [2, 1]
    assert versions[0]["author"] == "operator" and versions[0]["comment"] == "deeper"
    assert versions[0]["diff"] == {
        "added": {"max_dop": 8},
        "removed": {"min_dop": 2},
        "changed": {"depth": [2, 3]},
    }
    assert versions[0]["settings"] == {"depth": 3, "max_dop": 8}

    stale = client.patch(url, {"settings": {"depth": 9}, "expected_version": 1}, format="json")
    assert stale.status_code == 409
    assert "version 2" in error_fields(stale)["expected_version"]


def test_policies_are_staff_only(job_actor):
    assert job_actor.client.get("/api/v1/policies/").status_code == 403


def test_settings_must_be_an_object(staff_actor):
    response = staff_actor.client.post(
        "/api/v1/policies/", {"name": "x", "kind": "buffer", "settings": [1]}, format="json"
    )
    assert response.status_code == 400 and "settings" in error_fields(response)


def test_settings_diff_of_identical_settings_is_empty():
    assert settings_diff({"a": 1}, {"a": 1}) == {"added": {}, "removed": {}, "changed": {}}
