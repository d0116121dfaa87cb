"""The demand parser (arl-tangram §3.1 demands, §4.1 elasticity), one case per rule."""

from __future__ import annotations

import pytest

from apps.core.demand import DemandError, ResourceDemand, parse_demand


def errors_of(demand, elasticity=None, quotas=()):
    with pytest.raises(DemandError) as caught:
        parse_demand(demand, elasticity, api_quotas=quotas)
    return caught.value.detail


def test_ranges_units_and_shorthand_normalise():
    demand = parse_demand(
        {"cpu": {"min": 1, "max": 8}, "gpu": {"units": [8, 1, 4, 2]}, "memory_mb": 512}
    )
    assert demand.resources["gpu"] == ResourceDemand(1, 8, (1, 2, 4, 8))
    assert demand.resources["memory_mb"] == ResourceDemand(512, 512)
    assert demand.key_resource == "gpu"  # GPUs are preferred as the key resource
    assert demand.as_json()["gpu"] == {"units": [1, 2, 4, 8]}


def test_elasticity_picks_the_key_resource():
    demand = parse_demand(
        {"cpu": {"min": 1, "max": 3}, "gpu": 1},
        {"resource": "cpu", "efficiency": [1, 0.9, 0.5]},
    )
    assert demand.key_resource == "cpu"
    assert demand.key == ResourceDemand(1, 3)
    assert demand.elasticity == {"resource": "cpu", "efficiency": [1.0, 0.9, 0.5]}


def test_api_quota_resources_need_a_registered_quota():
    assert parse_demand({"api:search": 1}, api_quotas={"search"}).key_resource == "api:search"
    assert "api:search" in errors_of({"api:search": 1})["demand"]


@pytest.mark.parametrize(
    ("demand", "path", "fragment"),
    [
        ({"tpu": 1}, ("tpu",), "unknown resource"),
        ({"cpu": {"min": -1, "max": 2}}, ("cpu", "min"), "≥ 0"),
        ({"cpu": {"min": 4, "max": 2}}, ("cpu", "min"), "≤ max (2)"),
        ({"cpu": {"min": 0, "max": 0}}, ("cpu", "max"), "≥ 1"),
        ({"cpu": {"min": 1}}, ("cpu", "max"), "required"),
        ({"cpu": {"min": 1.5, "max": 2}}, ("cpu", "min"), "integer"),
        ({"cpu": {"min": True, "max": 2}}, ("cpu", "min"), "integer"),
        ({"cpu": {"min": 1, "max": 10**9}}, ("cpu", "max"), "≤ 4096"),
        ({"gpu": {"units": []}}, ("gpu", "units"), "empty"),
        ({"gpu": {"units": [1, 1]}}, ("gpu", "units"), "repeat"),
        ({"gpu": {"units": [1, 0]}}, ("gpu", "units", "[1]"), "≥ 1"),
        ({"gpu": {"units": [1], "min": 1}}, ("gpu", "units"), "cannot be combined"),
        ({"gpu": {"count": 1}}, ("gpu", "count"), "unknown key"),
        ({"gpu": "two"}, ("gpu",), "must be an integer"),
    ],
)
def test_bad_demands_name_the_path(demand, path, fragment):
    detail = errors_of(demand)["demand"]
    for step in path:
        detail = detail[step]
    assert any(fragment in reason for reason in detail), detail


@pytest.mark.parametrize("demand", [None, [], "cpu", {}])
def test_demand_must_be_a_non_empty_object(demand):
    assert "demand" in errors_of(demand)


@pytest.mark.parametrize(
    ("elasticity", "field", "fragment"),
    [
        ({"resource": "cpu", "efficiency": [1, 1.2]}, "efficiency", "(0, 1]"),
        ({"resource": "cpu", "efficiency": [1, 0]}, "efficiency", "(0, 1]"),
        ({"resource": "cpu", "efficiency": [1, -0.5]}, "efficiency", "(0, 1]"),
        ({"resource": "cpu", "efficiency": []}, "efficiency", "non-empty"),
        ({"resource": "cpu", "efficiency": [1]}, "efficiency", "m = 1..2"),
        ({"resource": "gpu", "efficiency": [1, 1]}, "resource", "not in the demand"),
        ({"efficiency": [1, 1]}, "resource", "required"),
        ({"resource": "cpu", "efficiency": [1, 1], "x": 1}, "x", "unknown key"),
    ],
)
def test_bad_elasticity_names_the_field(elasticity, field, fragment):
    detail = errors_of({"cpu": {"min": 1, "max": 2}}, elasticity)["elasticity"]
    text = str(detail[field])
    assert fragment in text, detail
