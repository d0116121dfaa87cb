"""bench artos_scaling: what a change of the actor count costs beyond a steady iteration, and a
quick run of both systems following the schedule."""

from __future__ import annotations

import pytest

from bench import artos_scaling
from bench._artos_compare import ray_missing
from bench._artos_cpu import tree_pids


def _row(iteration: int, actors: int, seconds: float, cpu: float) -> dict[str, float]:
    return {
        "iteration": float(iteration),
        "actors": float(actors),
        "collect_s": seconds,
        "iteration_s": seconds,
        "cpu_s": cpu,
    }


def test_a_change_costs_what_its_iteration_takes_beyond_a_steady_one_of_the_new_count():
    rows = [
        _row(0, 4, 9.0, 9.0),  # the first iteration starts the actors: no steady baseline
        _row(1, 4, 1.0, 1.0),
        _row(2, 8, 5.0, 4.0),  # scale-up
        _row(3, 8, 2.0, 2.0),
        _row(4, 8, 2.2, 2.0),
        _row(5, 2, 0.6, 0.5),  # scale-down
        _row(6, 2, 0.5, 0.5),
        _row(7, 4, 1.2, 1.0),  # scale-up to a count seen before
    ]
    changes = artos_scaling.scaling_costs(rows)
    assert [(c["from"], c["to"]) for c in changes] == [(4, 8), (8, 2), (2, 4)]
    up, down, again = changes
    assert up["added_s"] == pytest.approx(5.0 - 2.1) and up["added_cpu_s"] == pytest.approx(2.0)
    assert down["added_s"] == pytest.approx(0.1) and down["added_cpu_s"] == pytest.approx(0.0)
    assert again["added_s"] == pytest.approx(0.2) and again["steady_s"] == pytest.approx(1.0)


def test_a_change_to_a_count_never_held_steady_is_not_costed():
    rows = [_row(0, 2, 1.0, 1.0), _row(1, 2, 1.0, 1.0), _row(2, 6, 3.0, 3.0)]
    assert artos_scaling.scaling_costs(rows) == []


@pytest.mark.slow
def test_quick_run_scales_both_systems_and_leaves_no_process():
    missing = ray_missing()
    if missing:
        pytest.skip(missing)
    before = set(tree_pids())  # an earlier test's helpers (multiprocessing's resource tracker)
    report = artos_scaling.run(quick=True)
    runs = report.series["runs"]
    schedule = list(artos_scaling.workload(quick=True).actor_schedule)
    for system in ("loom", "ray"):
        (result,) = runs[system]
        assert [row["actors"] for row in result["iterations"]] == schedule
        assert all(row["cpu_s"] >= 0 for row in result["iterations"])
        assert result["leftover_processes_killed"] == 0, (system, result["leftover_processes"])
    assert runs["loom"][0]["zygote_starts"] == 1
    assert runs["ray"][0]["actors_created"] == max(schedule)
    assert runs["ray"][0]["actors_killed"] == max(schedule) - schedule[-1]
    assert set(tree_pids()) <= before
