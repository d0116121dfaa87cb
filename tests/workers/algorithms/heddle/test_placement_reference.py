"""The placement DP against a plain reference (heddle §5.2, formula 3): the production DP searches
each layer's crossing and reuses the previous layer's; the reference below takes every layer's
minimum over all ends (O(N²) per worker) and reads the partition back the same way. The two must
agree exactly — group sizes, assignment, makespan and every group's cost — not approximately."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.parallelism import worker_cost
from workers.algorithms.heddle.placement import (
    Placement,
    WorkerCost,
    aggregate_sorted,
    homogeneous_workers,
    place_trajectories,
)

MODEL = MPLatencyModel()


def reference_placement(
    lengths: np.ndarray, workers: Sequence[WorkerCost], max_items: int
) -> tuple[tuple[int, ...], float, tuple[float, ...], np.ndarray]:
    """Suffix DP with a full min over ends, then each worker in turn takes the largest group
    that keeps the remaining optimum (``_solve_items``'s documented refinement)."""
    n_traj = len(lengths)
    order = np.argsort(-lengths, kind="stable")
    ordered = lengths[order]
    bounds = aggregate_sorted(ordered, threshold=None, max_items=max_items)
    n = len(bounds) - 1
    prefix = np.concatenate([[0.0], np.cumsum(ordered)])
    starts, ends = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    valid = ends >= starts

    def cost_matrix(worker: WorkerCost) -> np.ndarray:
        matrix = worker.cost(
            ordered, prefix, bounds[starts[valid]], bounds[ends[valid]]
        )  # every (start, end ≥ start) pair
        full = np.full((n + 1, n + 1), np.inf)
        full[valid] = matrix
        return full

    matrices = {id(w): cost_matrix(w) for w in workers}
    after = np.full(n + 1, np.inf)
    after[n] = 0.0
    layers = [after]
    for worker in reversed(workers):
        after = np.min(np.maximum(matrices[id(worker)], after[None, :]), axis=1)
        layers.append(after)
    layers.reverse()
    cuts, costs, start = [0], [], 0
    for k, worker in enumerate(workers):
        target = layers[k][start] * (1 + 1e-9)
        row = matrices[id(worker)][start, start:]
        feasible = np.nonzero((row <= target) & (layers[k + 1][start:] <= target))[0]
        choice = int(feasible[-1]) if len(feasible) else n - start
        cuts.append(start + choice)
        costs.append(float(row[choice]))
        start += choice
    sizes = tuple(int(s) for s in np.diff(bounds[np.asarray(cuts)]))
    assignment = np.empty(n_traj, dtype=np.int64)
    assignment[order] = np.repeat(np.arange(len(workers)), sizes)
    return sizes, float(layers[0][0]), tuple(costs), assignment


def assert_same(placement: Placement, reference: tuple) -> None:
    sizes, optimum, costs, assignment = reference
    assert placement.group_sizes == sizes
    assert placement.group_costs == costs
    assert max(costs) == placement.makespan
    assert optimum == placement.makespan
    assert np.array_equal(placement.assignment, assignment)


def random_alpha(rng: np.random.Generator, n: int) -> np.ndarray:
    increments = np.sort(rng.random(n) * 2 + 0.01)  # convex, increasing
    alpha = np.concatenate([[0.0], np.cumsum(increments)])
    return alpha / alpha[1]


def random_fleet(rng: np.random.Generator, n: int) -> list[WorkerCost]:
    """Runs of identical workers (the crossings are reused within a run), up to three kinds:
    α from the profiled curve or random, group limits and per-member overheads sometimes."""
    fleet: list[WorkerCost] = []
    for _ in range(int(rng.integers(1, 4))):
        alpha = (
            MODEL.alpha_curve(n, 1, int(rng.integers(1, 64)))
            if rng.random() < 0.5
            else random_alpha(rng, n)
        )
        worker = WorkerCost(
            alpha,
            tau=float(rng.uniform(0.01, 1.0)),
            group_limit=int(rng.integers(max(1, n // 6), n + 1)) if rng.random() < 0.3 else None,
            overhead_per_trajectory=float(rng.uniform(0, 2)) if rng.random() < 0.3 else 0.0,
        )
        fleet.extend([worker] * int(rng.integers(1, 30)))
    return fleet


@pytest.mark.parametrize("seed", range(60))
def test_the_dp_places_exactly_as_the_plain_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    lengths = rng.lognormal(6, 1.2, n)
    if seed % 4 == 0:
        lengths = np.round(lengths / 100) * 100 + 1  # ties
    workers = random_fleet(rng, n)
    max_items = int(rng.choice([n, 32, 128]))
    reference = reference_placement(lengths, workers, max_items)
    if not np.isfinite(reference[1]):
        with pytest.raises(ValueError, match="group limits"):
            place_trajectories(lengths, workers, max_items=max_items)
        return
    assert_same(place_trajectories(lengths, workers, max_items=max_items), reference)


def test_the_overhead_benchmarks_instance_places_exactly_as_the_plain_reference() -> None:
    """1 600 trajectories onto 64 identical MP-1 workers, aggregated to 256 items
    (``bench.heddle_overhead``), and a heterogeneous plan of the annealer's kind."""
    lengths = np.random.default_rng(1).lognormal(8, 1.1, 1600)
    fleet = homogeneous_workers(
        worker_cost(MODEL, 1, len(lengths), batch_limit=64, group_model="paper"), 64
    )
    assert_same(place_trajectories(lengths, fleet), reference_placement(lengths, fleet, 256))
    by_degree = {
        m: worker_cost(MODEL, m, len(lengths), batch_limit=64 * m, group_model="paper")
        for m in (8, 4, 2, 1)
    }
    plan = [by_degree[m] for m in (8, 8, 4, 4, 4, 2, 2, *([1] * 20))]
    assert_same(place_trajectories(lengths, plan), reference_placement(lengths, plan, 256))
