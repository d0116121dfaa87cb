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


def test_plan_migrations_promotes_a_trajectory_that_grew() -> None:
    predicted = {"a": 100.0, "b": 90.0, "c": 80.0, "d": 10.0}
    workers = {"a": 0, "b": 1, "c": 1, "d": 1}
    sizes = [1, 3]
    assert plan_migrations(predicted, workers, sizes, [0, 1], ["b"]) == []
    predicted["d"] = 500.0  # d is now predicted the longest
    requests = plan_migrations(predicted, workers, sizes, [0, 1], ["d"])
    assert requests == [MigrationRequest("d", 1, 0, 500.0)]
    # a demotion is not migrated by default, but is with promote_only=False
    predicted["a"] = 1.0
    assert plan_migrations(predicted, workers, sizes, [0, 1], ["a"]) == []
    demoted = plan_migrations(predicted, workers, sizes, [0, 1], ["a"], promote_only=False)
    assert demoted == [MigrationRequest("a", 0, 1, 1.0)]


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
