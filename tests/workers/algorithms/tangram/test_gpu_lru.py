"""The EOE eviction rule the GPU topology (simulator, scheduler) and the GPU agent share."""

from __future__ import annotations

from workers.algorithms.tangram.topology.gpu import CachedInstance, lru_evictions


def test_nothing_evicted_when_the_service_fits() -> None:
    resident = {"a": CachedInstance(1.0, 0, 1, 30.0)}
    assert lru_evictions(resident, {0: 30.0, 1: 0.0}, 100.0, 0, 1, 50.0) == []


def test_least_recently_used_overlapping_instance_goes_first() -> None:
    resident = {
        "old": CachedInstance(1.0, 0, 1, 40.0),
        "new": CachedInstance(5.0, 0, 1, 40.0),
        "elsewhere": CachedInstance(0.0, 1, 1, 90.0),
    }
    used = {0: 80.0, 1: 90.0}
    assert lru_evictions(resident, used, 100.0, 0, 1, 50.0) == ["old"]
    assert lru_evictions(resident, used, 100.0, 0, 1, 90.0) == ["old", "new"]


def test_a_wide_instance_frees_every_gpu_it_spans() -> None:
    resident = {"wide": CachedInstance(1.0, 0, 2, 60.0), "narrow": CachedInstance(2.0, 1, 1, 20.0)}
    used = {0: 60.0, 1: 80.0}
    # The two-GPU chunk needs 50 on both: evicting the older wide instance is enough.
    assert lru_evictions(resident, used, 100.0, 0, 2, 50.0) == ["wide"]


def test_ties_break_by_key_and_exclusive_evicts_all_overlapping() -> None:
    resident = {"b": CachedInstance(1.0, 0, 1, 10.0), "a": CachedInstance(1.0, 0, 1, 10.0)}
    assert lru_evictions(resident, {0: 20.0}, 25.0, 0, 1, 10.0) == ["a"]
    assert lru_evictions(resident, {0: 20.0}, 100.0, 0, 1, 10.0, exclusive=True) == ["a", "b"]


def test_no_room_even_after_evicting_everything_returns_all_candidates() -> None:
    resident = {"a": CachedInstance(1.0, 0, 1, 10.0)}
    assert lru_evictions(resident, {0: 10.0}, 100.0, 0, 1, 150.0) == ["a"]
