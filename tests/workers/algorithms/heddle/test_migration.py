from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.algorithms.heddle.migration import (
    MigrationRequest,
    TransmissionScheduler,
    migration_target,
    plan_migrations,
    scaled_capacities,
)


def test_scaled_capacities_and_targets() -> None:
    sizes = [2, 3, 5]
    assert np.allclose(scaled_capacities(sizes, 10), [2, 5, 10])
    assert np.allclose(scaled_capacities(sizes, 5), [1, 2.5, 5])
    assert [migration_target(r, sizes, 10) for r in range(10)] == [0, 0, 1, 1, 1, 2, 2, 2, 2, 2]
    # half the trajectories left: the partitions shrink proportionally
    assert [migration_target(r, sizes, 5) for r in range(5)] == [0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        migration_target(5, sizes, 5)


def test_plan_migrations_moves_a_trajectory_whose_rank_left_its_group() -> None:
    predicted = {f"t{i}": 100.0 - i for i in range(10)}
    workers = {f"t{i}": 0 if i < 2 else 1 for i in range(10)}
    sizes = [2, 8]
    assert plan_migrations(predicted, workers, sizes, [0, 1], list(predicted), hysteresis=0) == []
    predicted["t9"] = 500.0  # t9 is now predicted the longest, t1 drops to rank 2
    requests = plan_migrations(predicted, workers, sizes, [0, 1], ["t9", "t1"], hysteresis=0)
    assert MigrationRequest("t9", 1, 0, 500.0) in requests
    assert MigrationRequest("t1", 0, 1, 99.0) in requests
    # t1 no longer belongs on worker 0, so t9's promotion is allowed even if t1 has not left yet
    assert plan_migrations(predicted, workers, sizes, [0, 1], ["t9"], hysteresis=0) == [
        MigrationRequest("t9", 1, 0, 500.0)
    ]


def test_hysteresis_keeps_boundary_trajectories_in_place() -> None:
    predicted = {f"t{i}": 100.0 - i for i in range(40)}
    workers = {f"t{i}": 0 if i < 20 else 1 for i in range(40)}
    predicted["t20"] = 100.5  # rank 0, but its group (20..40) is only a few ranks away
    assert plan_migrations(predicted, workers, [20, 20], [0, 1], ["t20"], hysteresis=0) != []
    assert plan_migrations(predicted, workers, [20, 20], [0, 1], ["t20"], hysteresis=0.25) == []
    predicted["t39"] = 101.0  # far outside its group: it moves
    moved = plan_migrations(predicted, workers, [20, 20], [0, 1], ["t39"], hysteresis=0.0)
    assert moved == [MigrationRequest("t39", 1, 0, 101.0)]


def test_capacity_blocks_promotion_into_a_full_group() -> None:
    predicted = {"a": 100.0, "b": 99.0, "c": 98.0, "d": 10.0}
    workers = {"a": 0, "b": 0, "c": 1, "d": 1}
    predicted["d"] = 98.5  # rank 2: it belongs to group 0 only if group 0 had room
    assert plan_migrations(predicted, workers, [3, 1], [0, 1], ["d"], hysteresis=0) == [
        MigrationRequest("d", 1, 0, 98.5)
    ]
    assert plan_migrations(predicted, workers, [2, 2], [0, 1], ["d"], hysteresis=0) == []


def test_transmission_scheduler_longest_first_without_shared_endpoints() -> None:
    scheduler = TransmissionScheduler()
    scheduler.submit(MigrationRequest("short", 0, 1, 10.0))
    scheduler.submit(MigrationRequest("long", 0, 2, 99.0))
    scheduler.submit(MigrationRequest("other", 3, 4, 50.0))
    batch = scheduler.next_batch()
    assert [r.trajectory_id for r in batch] == ["long", "other"]
    assert scheduler.next_batch() == []  # worker 0 is busy with "long"
    scheduler.complete("long")
    assert [r.trajectory_id for r in scheduler.next_batch()] == ["short"]
    with pytest.raises(ValueError):
        scheduler.submit(MigrationRequest("self", 2, 2, 1.0))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(0, 5), st.floats(1, 1000)),
        min_size=1,
        max_size=25,
    ),
    st.integers(0, 10),
)
def test_transmission_batches_never_conflict(
    raw: list[tuple[int, int, float]], completions: int
) -> None:
    scheduler = TransmissionScheduler()
    for i, (src, dst, length) in enumerate(raw):
        if src != dst:
            scheduler.submit(MigrationRequest(f"t{i}", src, dst, length))
    rounds = 0
    while scheduler.waiting or scheduler.running:
        scheduler.next_batch()
        endpoints = [w for r in scheduler.running for w in (r.source, r.destination)]
        assert len(endpoints) == len(set(endpoints))
        running = sorted(scheduler.running, key=lambda r: -r.predicted_length)
        for request in running[: max(1, completions % 3)]:
            scheduler.complete(request.trajectory_id)
        rounds += 1
        assert rounds < 100
