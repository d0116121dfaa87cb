"""DPArrange equals brute force on random small instances, for both DP operators (App. B)."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

from workers.algorithms.tangram import (
    ActionSpec,
    BasicDPOperator,
    Elasticity,
    GpuChunkDPOperator,
    GpuServiceSpec,
    GpuTopology,
    ResourceDemand,
    chunk_take,
    dp_arrange,
)


def _cost_table(rng: random.Random, options: list[int]) -> np.ndarray:
    t1 = rng.uniform(1.0, 100.0)
    p = rng.uniform(0.0, 1.0)
    table = np.full(max(options) + 1, np.inf)
    for k in options:
        table[k] = t1 / (k * (1.0 / (k * ((1 - p) + p / k))))
    return table


def _brute_basic(costs: list[np.ndarray], capacity: int) -> float:
    best = np.inf
    ranges = [[k for k in range(len(c)) if np.isfinite(c[k])] for c in costs]
    for combo in itertools.product(*ranges):
        if sum(combo) <= capacity:
            best = min(best, sum(float(c[k]) for c, k in zip(costs, combo, strict=True)))
    return best


@pytest.mark.parametrize("seed", range(60))
def test_basic_operator_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    tasks = rng.randint(1, 4)
    capacity = rng.randint(0, 12)
    costs = []
    for _ in range(tasks):
        if rng.random() < 0.5:
            low = rng.randint(1, 3)
            options = list(range(low, low + rng.randint(0, 5) + 1))
        else:
            options = sorted(rng.sample([1, 2, 3, 4, 6, 8], rng.randint(1, 3)))
        costs.append(_cost_table(rng, options))
    total, units = dp_arrange(BasicDPOperator(capacity), costs)
    expected = _brute_basic(costs, capacity)
    if np.isinf(expected):
        assert np.isinf(total)
        return
    assert total == pytest.approx(expected)
    assert sum(units) <= capacity
    assert sum(float(c[k]) for c, k in zip(costs, units, strict=True)) == pytest.approx(total)


def test_basic_prefixes_are_each_optimal() -> None:
    rng = random.Random(7)
    costs = [_cost_table(rng, list(range(1, 6))) for _ in range(4)]
    arrangement = BasicDPOperator(9).arrange_prefixes(costs)
    for prefix in range(5):
        assert arrangement.best_cost(prefix) == pytest.approx(_brute_basic(costs[:prefix], 9))
        assert sum(arrangement.allocation(prefix)) <= 9


def _free_bitmaps(topology: GpuTopology) -> dict[str, list[bool]]:
    maps = {n: [False] * topology.gpus_per_node for n in topology.node_names}
    for level, chunks in enumerate(topology.free_chunks):
        for node, start in chunks:
            for g in range(start, start + (1 << level)):
                maps[node][g] = True
    return maps


def _placeable(sizes: list[int], maps: dict[str, list[bool]]) -> bool:
    """Exhaustive aligned placement of power-of-two requests into free GPUs (no buddy logic)."""
    if not sizes:
        return True
    size, rest = sizes[0], sizes[1:]
    for bitmap in maps.values():
        for start in range(0, len(bitmap), size):
            span = range(start, start + size)
            if start + size <= len(bitmap) and all(bitmap[g] for g in span):
                for g in span:
                    bitmap[g] = False
                ok = _placeable(rest, maps)
                for g in span:
                    bitmap[g] = True
                if ok:
                    return True
    return False


def _random_gpu_state(rng: random.Random) -> GpuTopology:
    service = GpuServiceSpec("m", weights_mb=1000.0)
    nodes = [f"n{i}" for i in range(rng.randint(1, 2))]
    topology = GpuTopology(nodes, {"m": service}, gpus_per_node=rng.choice([4, 8]))
    for i in range(rng.randint(0, 6)):
        size = rng.choice([1, 1, 2, 4])
        if chunk_take(topology.free_counts(), size) is None:
            continue
        spec = ActionSpec(f"x{i}", {"gpu": ResourceDemand.exactly(size)}, service="m")
        topology.allocate(spec, "pool", {"gpu": size}, now=float(i))
    return topology


@pytest.mark.parametrize("seed", range(60))
def test_gpu_chunk_operator_matches_brute_force(seed: int) -> None:
    rng = random.Random(1000 + seed)
    topology = _random_gpu_state(rng)
    tasks = rng.randint(1, 4)
    costs = []
    for _ in range(tasks):
        options = sorted(rng.sample([1, 2, 4, 8], rng.randint(1, 4)))
        costs.append(_cost_table(rng, options))
    operator = GpuChunkDPOperator(topology.free_counts(), topology.total_gpus)
    total, units = dp_arrange(operator, costs)
    maps = _free_bitmaps(topology)
    best = np.inf
    ranges = [[k for k in (1, 2, 4, 8) if k < len(c) and np.isfinite(c[k])] for c in costs]
    for combo in itertools.product(*ranges):
        if _placeable(sorted(combo, reverse=True), maps):
            best = min(best, sum(float(c[k]) for c, k in zip(costs, combo, strict=True)))
    if np.isinf(best):
        assert np.isinf(total)
        return
    assert total == pytest.approx(best)
    assert _placeable(sorted(units, reverse=True), maps)


def test_gpu_operator_encoding_round_trips() -> None:
    operator = GpuChunkDPOperator((3, 2, 1, 1), total_gpus=16)
    for state in [(0, 0, 0, 0), (3, 2, 1, 1), (16, 8, 4, 2), (5, 0, 3, 1)]:
        assert operator.decode(operator.encode(state)) == state


def test_chunk_take_splits_buddies() -> None:
    assert chunk_take((0, 0, 0, 1), 1) == (1, 1, 1, 0)
    assert chunk_take((0, 0, 1, 0), 2) == (0, 1, 0, 0)
    assert chunk_take((1, 0, 0, 0), 2) is None
    assert chunk_take((0, 0, 0, 1), 3) is None


def test_elastic_durations_in_dp_follow_eq1() -> None:
    spec = ActionSpec(
        "a",
        {"cpu": ResourceDemand.between(1, 4)},
        key_resource="cpu",
        elasticity=Elasticity.amdahl(1.0, 4),
        t1=8.0,
    )
    table = spec.duration_table(4, 8.0)
    assert np.isinf(table[0])
    assert list(table[1:]) == pytest.approx([8.0, 4.0, 8.0 / 3, 2.0])
    total, units = dp_arrange(BasicDPOperator(4), [table])
    assert units == [4] and total == pytest.approx(2.0)
