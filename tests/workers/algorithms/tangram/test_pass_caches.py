"""The pass's caches stay exact: held-unit arrays, cached demands, the pruned estimate, and the
plain-float inverse speedups."""

from __future__ import annotations

import dataclasses
import heapq
import math
import random

import pytest

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler
from workers.algorithms.tangram.action import ActionSpec, Elasticity, ResourceDemand
from workers.algorithms.tangram.entries import Waiting
from workers.algorithms.tangram.held import HeldUnits
from workers.algorithms.tangram.objective import (
    _clamped,
    _place,
    _place_rest,
    _rest_ends,
    estimate_remaining,
)
from workers.algorithms.tangram.sizing import _inverse_speedup, _ladder_inverse


def test_held_units_reuse_slots_and_report_one_release_per_unit() -> None:
    held = HeldUnits()
    for i in range(20):  # past the initial capacity: the arrays grow
        held.add(f"a{i}", 10.0 + i, {"cpu": 2, "memory_mb": 100})
    held.remove("a3")
    held.remove("missing")  # unknown ids are ignored
    held.add("b", 5.0, {"cpu": 1})
    assert len(held) == 20
    times = held.release_times("cpu", now=12.0)
    assert len(times) == 19 * 2 + 1
    assert sorted(times)[:3] == [0.0, 0.0, 0.0]  # b (past its end) and a0 (ends at 10)
    assert held.release_times("gpu", now=0.0) == []


def _reward(action_id: str, tool: str = "pytest", t1: float | None = 60.0) -> ActionSpec:
    return ActionSpec(
        action_id,
        {"cpu": ResourceDemand.between(1, 32)},
        tool=tool,
        key_resource="cpu",
        elasticity=Elasticity.amdahl(0.95, 32),
        t1=t1,
    )


def test_a_cached_demand_follows_policy_and_history_changes() -> None:
    scheduler = ElasticScheduler(CpuTopology([CpuNodeSpec.uniform("n0", 64, 1, memory_mb=1 << 20)]))
    sizing = scheduler._sizing
    profiled = Waiting(_reward("p"), 0.0)
    unprofiled = Waiting(
        ActionSpec("u", {"cpu": ResourceDemand.exactly(1)}, tool="env"), submitted_at=0.0
    )
    assert sizing.waiting_demand(profiled) == (1, pytest.approx(60.0))
    assert sizing.waiting_demand(unprofiled) == (1, pytest.approx(1.0))  # the default
    scheduler.history.record(unprofiled.spec, 1, 4.0)
    assert sizing.waiting_demand(unprofiled) == (1, pytest.approx(4.0))
    scheduler.set_policy(min_dop=4)
    units, seconds = sizing.waiting_demand(profiled)
    assert units == 4 and seconds == pytest.approx(_reward("p").duration(4))
    scheduler.set_policy(min_dop=None)
    assert sizing.waiting_demand(profiled) == (1, pytest.approx(60.0))


def _heap_place(heap: list[float], units: int, seconds: float) -> float:
    """The reference placement on a binary heap: pop ``units`` releases, push their end."""
    if not heap:
        return seconds
    units = max(1, min(units, len(heap)))
    start = 0.0
    for _ in range(units):
        start = heapq.heappop(heap)
    for _ in range(units):
        heapq.heappush(heap, start + seconds)
    return start + seconds


def _brute_force(profile: list[float], first, rest) -> float:
    best = float("inf")
    for units, seconds, extra in first:
        heap = list(profile)
        heapq.heapify(heap)
        total = _heap_place(heap, units, seconds) + extra
        for demand_units, duration in rest:
            total += _heap_place(heap, demand_units, duration)
        best = min(best, total)
    return best


@pytest.mark.parametrize("seed", range(20))
def test_the_sorted_placement_matches_a_heap(seed: int) -> None:
    rng = random.Random(seed)
    profile = sorted(rng.choice([0.0, rng.uniform(0, 20)]) for _ in range(rng.randint(1, 40)))
    heap = list(profile)
    for _ in range(30):
        units, seconds = rng.randint(1, 12), rng.uniform(0.1, 20)
        assert _place(profile, units, seconds) == pytest.approx(_heap_place(heap, units, seconds))
        assert profile == sorted(heap)


@pytest.mark.parametrize("seed", range(40))
def test_the_pruned_estimate_equals_trying_every_option_in_full(seed: int) -> None:
    rng = random.Random(seed)
    profile = [rng.choice([0.0, rng.uniform(0, 20)]) for _ in range(rng.randint(1, 24))]
    first = [
        (units, rng.uniform(1, 30) / units, rng.uniform(0, 3))
        for units in sorted(rng.sample([1, 2, 4, 8, 16], rng.randint(1, 5)))
    ]
    single = seed % 2 == 0
    rest = [
        (1 if single else rng.choice([1, 2, 3, 8, 16]), rng.uniform(0.1, 20))
        for _ in range(rng.randint(0, 30))
    ]
    exact = _brute_force(profile, first, rest)
    assert estimate_remaining(profile, first, rest) == pytest.approx(exact)
    # a caller that only asks "below this limit?" gets the estimate below it, inf above it
    assert estimate_remaining(profile, first, rest, limit=exact + 1.0) == pytest.approx(exact)
    assert estimate_remaining(profile, first, rest, limit=exact - 1e-6) == math.inf


def test_an_elasticity_hashes_and_compares_by_its_table() -> None:
    first, again = Elasticity.amdahl(0.9, 32), Elasticity.amdahl(0.9, 32)
    other = Elasticity.amdahl(0.8, 32)
    assert first == again and hash(first) == hash(again)
    assert first != other
    assert len({first, again, other}) == 2
    assert dataclasses.replace(first, efficiency=other.efficiency) == other


@pytest.mark.parametrize("seed", range(10))
def test_a_ladders_plain_inverse_speedups_equal_the_arrays_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        size = rng.choice([4, 8, 32])
        elasticity = (
            Elasticity.amdahl(rng.random(), size)
            if rng.random() < 0.5
            else Elasticity(tuple(rng.uniform(0.01, 1.0) for _ in range(size)))
        )
        ladder = tuple(sorted(rng.sample(range(1, size + 8), 5)))  # some past the table
        table = _inverse_speedup(elasticity, ladder[-1] + 1)
        assert _ladder_inverse(elasticity, ladder) == [float(table[k]) for k in ladder]


@pytest.mark.parametrize("seed", range(20))
def test_the_inlined_rest_placement_equals_placing_one_by_one_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    profile = sorted(rng.choice([0.0, rng.uniform(0, 20)]) for _ in range(rng.randint(1, 40)))
    rest = [(rng.choice([0, 1, 2, 3, 8, 16, 64]), rng.uniform(0.1, 20)) for _ in range(30)]
    one_by_one = list(profile)
    expected = [_place(one_by_one, units, seconds) for units, seconds in rest]
    clamped = _clamped(rest, len(profile))
    assert _rest_ends(list(profile), clamped, single=False) == expected
    total = 0.5
    for end in expected:  # in order, as the loop adds them (``sum`` may compensate)
        total += end
    assert _place_rest(list(profile), clamped, [0.0] * len(rest), 0.5, math.inf) == total


@pytest.mark.parametrize("width", [1, 3, 8, 17, 32, 300])
def test_a_cost_rows_inverse_speedup_is_the_direct_table_at_every_width(width: int) -> None:
    scheduler = ElasticScheduler(CpuTopology([CpuNodeSpec.uniform("n0", 64, 1, memory_mb=1 << 20)]))
    spec = _reward("r")
    assert spec.elasticity is not None
    shape = scheduler._sizing.cost_shape(spec, width)
    size = shape.options[-1] + 1
    assert shape.inverse_speedup.tolist() == _inverse_speedup(spec.elasticity, size).tolist()
    assert shape.mask.tolist() == [0.0 if k in shape.options else math.inf for k in range(size)]
