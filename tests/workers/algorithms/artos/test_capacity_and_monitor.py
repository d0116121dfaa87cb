"""Eviction policies and the workload monitor (artos §4.2–§4.3)."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.artos import (
    BufferFullError,
    CapacityError,
    FifoEviction,
    KeepUnsampled,
    MonitorError,
    ReservoirEviction,
    WorkloadMonitor,
    eviction_policy,
)


def test_fifo_overwrites_the_oldest_slot():
    policy, rng = FifoEviction(3), np.random.default_rng(0)
    assert [policy.place(rng) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert policy.occupied().tolist() == [2, 0, 1]


def test_reservoir_keeps_every_write_with_equal_probability():
    capacity, writes, trials = 4, 12, 6000
    held = np.zeros(writes)
    rng = np.random.default_rng(1)
    for _ in range(trials):
        policy = ReservoirEviction(capacity)
        owner = np.full(capacity, -1)
        for item in range(writes):
            slot = policy.place(rng)
            if slot is not None:
                owner[slot] = item
        np.add.at(held, owner, 1)
    assert np.allclose(held / trials, capacity / writes, atol=0.03)


def test_keep_unsampled_refuses_instead_of_dropping():
    policy, rng = KeepUnsampled(2, name="ppo"), np.random.default_rng(0)
    first, second = policy.place(rng), policy.place(rng)
    with pytest.raises(BufferFullError, match=r"^ppo: full"):
        policy.place(rng)
    policy.mark_sampled([first])
    assert policy.place(rng) == first
    policy.release([second])
    assert policy.place(rng) == second


def test_eviction_policy_by_name():
    assert isinstance(eviction_policy("fifo", 2), FifoEviction)
    with pytest.raises(CapacityError, match=r"^eviction"):
        eviction_policy("lifo", 2)
    with pytest.raises(CapacityError, match=r"^capacity"):
        eviction_policy("fifo", 0)


def test_monitor_is_unstable_until_the_window_fills():
    monitor = WorkloadMonitor()
    for _ in range(4):
        assert not monitor.record(0.5, 10.0).stable
    reading = monitor.record(0.5, 10.0)
    assert reading.stable and reading.prewarm_threshold == pytest.approx(9.5)


def test_monitor_threshold_follows_the_paper_formula():
    monitor = WorkloadMonitor(window=5, stability=0.2)
    starts = [0.4, 0.5, 0.6, 0.5, 0.45]
    fins = [10.0, 10.5, 9.8, 10.2, 10.1]
    for start, fin in zip(starts, fins, strict=True):
        reading = monitor.record(start, fin)
    intervals = [f - s for s, f in zip(starts, fins, strict=True)]
    expected = min(fins) - max(starts) - (max(intervals) - min(intervals))
    assert reading.stable
    assert reading.prewarm_threshold == pytest.approx(expected)


def test_monitor_range_at_lambda_times_mean_is_not_stable():
    monitor = WorkloadMonitor(window=5, stability=0.2)
    for fin in [9.0, 11.0, 10.0, 10.0, 10.0]:  # range 2.0 == 0.2 * mean 10.0
        reading = monitor.record(0.1, fin)
    assert not reading.stable and reading.prewarm_threshold is None
    reading = monitor.record(0.1, 10.0)  # window slides: 11, 10, 10, 10, 10
    assert reading.stable


def test_monitor_bad_samples_name_the_field():
    with pytest.raises(MonitorError, match=r"^learner_fin"):
        WorkloadMonitor().record(2.0, 1.0)
    with pytest.raises(MonitorError, match=r"^actor_start"):
        WorkloadMonitor().record(float("nan"), 1.0)
    with pytest.raises(MonitorError, match=r"^window"):
        WorkloadMonitor(window=1)


class _ScanningTable:
    """The policies as plain scans of the order table: the semantics the fast table keeps."""

    def __init__(self, kind: str, capacity: int) -> None:
        self.kind, self.capacity, self.written, self.seen = kind, capacity, 0, 0
        self.order = np.full(capacity, -1, dtype=np.int64)
        self.sampled = np.zeros(capacity, dtype=bool)

    def _store(self, slot: int) -> int:
        self.order[slot], self.sampled[slot] = self.written, False
        self.written += 1
        return slot

    def place(self, rng: np.random.Generator) -> int | None:
        self.seen += 1
        free = np.flatnonzero(self.order < 0)
        if free.size:
            return self._store(int(free[0]))
        if self.kind == "fifo":
            return self._store(int(np.argmin(self.order)))
        if self.kind == "reservoir":
            pick = int(rng.integers(0, self.seen))
            return self._store(pick) if pick < self.capacity else None
        reusable = np.flatnonzero(self.sampled)
        if reusable.size == 0:
            raise BufferFullError("full")
        return self._store(int(reusable[np.argmin(self.order[reusable])]))


@pytest.mark.parametrize("kind", ["fifo", "reservoir", "keep_unsampled"])
@pytest.mark.parametrize("seed", range(6))
def test_policies_place_as_a_scan_of_the_table_would(kind, seed):
    """Random writes, releases (a killed actor's steps) and samples: the same slots, the same
    write order and the same refusals as scanning the whole table for every step."""
    capacity = 13
    fast, slow = eviction_policy(kind, capacity), _ScanningTable(kind, capacity)
    fast_rng, slow_rng, moves = (np.random.default_rng(seed) for _ in range(3))
    for _ in range(400):
        move = moves.random()
        if move < 0.15:
            slots = moves.integers(0, capacity, size=int(moves.integers(1, 5)))
            fast.release(slots)
            slow.order[slots], slow.sampled[slots] = -1, False
        elif move < 0.3:
            held = slow.order >= 0
            slots = np.flatnonzero(held & (moves.random(capacity) < 0.5))
            fast.mark_sampled(slots)
            slow.sampled[slots] = True
        else:
            try:
                expected = slow.place(slow_rng)
            except BufferFullError:
                with pytest.raises(BufferFullError):
                    fast.place(fast_rng)
                continue
            assert fast.place(fast_rng) == expected
        assert (
            fast.occupied().tolist()
            == np.flatnonzero(slow.order >= 0)[
                np.argsort(slow.order[slow.order >= 0], kind="stable")
            ].tolist()
        )


def test_fifo_place_does_not_scan_the_table():
    """Steps placed into a large table cost the same whether it is nearly empty or full."""
    policy, rng = FifoEviction(200_000), np.random.default_rng(0)
    placed = [policy.place(rng) for _ in range(200_000 + 5)]
    assert placed[:3] == [0, 1, 2] and placed[-5:] == [0, 1, 2, 3, 4]
