"""Presorted DP (heddle §5.2): optimality against brute force, aggregation, speed-independent
properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.algorithms.heddle.placement import (
    GroupModel,
    WorkerCost,
    aggregate_sorted,
    group_makespan,
    homogeneous_workers,
    place_trajectories,
)

MODEL = MPLatencyModel()


def brute_force_any_partition(lengths: np.ndarray, workers: list[WorkerCost]) -> float:
    """Every assignment of trajectories to workers (k^n)."""
    n, k = len(lengths), len(workers)
    best = np.inf
    for assignment in itertools.product(range(k), repeat=n):
        cost = max(
            group_makespan([lengths[t] for t in range(n) if assignment[t] == w], workers[w])
            for w in range(k)
        )
        best = min(best, cost)
    return best


def brute_force_contiguous(lengths: np.ndarray, workers: list[WorkerCost]) -> float:
    ordered = np.sort(lengths)[::-1]
    n, k = len(ordered), len(workers)
    best = np.inf
    for cuts in itertools.combinations_with_replacement(range(n + 1), k - 1):
        bounds = [0, *cuts, n]
        cost = max(group_makespan(ordered[bounds[w] : bounds[w + 1]], workers[w]) for w in range(k))
        best = min(best, cost)
    return best


def random_alpha(rng: np.random.Generator, n: int) -> np.ndarray:
    increments = np.sort(rng.random(n) * 2 + 0.01)  # convex, increasing
    alpha = np.concatenate([[0.0], np.cumsum(increments)])
    return alpha / alpha[1]


@pytest.mark.parametrize("seed", range(40))
def test_paper_model_dp_matches_brute_force_over_all_partitions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 7)), int(rng.integers(1, 4))
    lengths = rng.lognormal(0, 1, n)
    alpha = MODEL.alpha_curve(n, 1) if seed % 2 else random_alpha(rng, n)
    workers = homogeneous_workers(WorkerCost(alpha, tau=0.5), k)
    placement = place_trajectories(lengths, workers)
    assert placement.makespan == pytest.approx(brute_force_any_partition(lengths, workers))
    recomputed = max(
        group_makespan([lengths[t] for t in group], workers[w])
        for w, group in enumerate(placement.groups())
    )
    assert recomputed == pytest.approx(placement.makespan)


@pytest.mark.parametrize("seed", range(30))
def test_heterogeneous_and_fluid_dp_match_brute_force_over_contiguous_partitions(
    seed: int,
) -> None:
    rng = np.random.default_rng(100 + seed)
    n, k = int(rng.integers(1, 8)), int(rng.integers(1, 4))
    lengths = rng.lognormal(0, 1, n)
    model: GroupModel = "fluid" if seed % 2 else "paper"
    workers = [
        WorkerCost(
            random_alpha(rng, n),
            tau=float(rng.uniform(0.2, 1.0)),
            batch_limit=int(rng.integers(1, n + 1)) if seed % 3 == 0 else None,
            model=model,
        )
        for _ in range(k)
    ]
    placement = place_trajectories(lengths, workers)
    assert placement.makespan == pytest.approx(brute_force_contiguous(lengths, workers))


def test_group_limit_is_respected_and_infeasible_raises() -> None:
    lengths = np.arange(1, 11, dtype=float)
    worker = WorkerCost(MODEL.alpha_curve(10, 1), tau=1.0, group_limit=4)
    placement = place_trajectories(lengths, homogeneous_workers(worker, 3))
    assert max(placement.group_sizes) <= 4
    assert sum(placement.group_sizes) == 10
    with pytest.raises(ValueError, match="group limits"):
        place_trajectories(lengths, homogeneous_workers(worker, 2))


@pytest.mark.parametrize("model", ["paper", "fluid"])
def test_zero_length_trajectories_keep_the_group_limit(model: GroupModel) -> None:
    """A group led by a zero-length prediction (a new trajectory with no prior) past its limit
    costs ∞ (not ∞·0 = NaN): the limits still hold and a fitting fleet is never refused."""
    rng = np.random.default_rng(7)
    for n in range(1, 9):
        for limit, workers in ((1, n), (2, -(-n // 2)), (3, -(-n // 3) + 1)):
            worker = WorkerCost(MODEL.alpha_curve(n, 1), tau=1.0, group_limit=limit, model=model)
            for _ in range(10):
                lengths = np.sort(rng.choice([0.0, 0.0, 1.0, 5.0], n))[::-1]
                placement = place_trajectories(lengths, homogeneous_workers(worker, workers))
                assert sum(placement.group_sizes) == n
                assert max(placement.group_sizes) <= limit


def test_longest_trajectories_go_to_the_first_workers_and_assignment_is_consistent() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.lognormal(7, 1, 200)
    worker = WorkerCost(MODEL.alpha_curve(200, 1, 48), MODEL.tau(1), batch_limit=48, model="fluid")
    placement = place_trajectories(lengths, homogeneous_workers(worker, 8))
    assert sum(placement.group_sizes) == 200
    longest = int(np.argmax(lengths))
    assert placement.assignment[longest] == 0
    for w, group in enumerate(placement.groups()):
        assert all(placement.assignment[t] == w for t in group)
    # contiguity: every trajectory of group w is at least as long as every one of group w+1
    groups = [g for g in placement.groups() if g]
    for first, second in itertools.pairwise(groups):
        assert min(lengths[first]) >= max(lengths[second])


def test_aggregation_bounds_items_and_keeps_the_makespan_close() -> None:
    rng = np.random.default_rng(5)
    lengths = rng.lognormal(7, 1, 1600)
    bounds = aggregate_sorted(np.sort(lengths)[::-1], threshold=None, max_items=128)
    assert len(bounds) - 1 <= 128 and bounds[0] == 0 and bounds[-1] == 1600
    worker = WorkerCost(MODEL.alpha_curve(1600, 1, 48), MODEL.tau(1), batch_limit=48)
    workers = homogeneous_workers(worker, 64)
    exact = place_trajectories(lengths, workers, max_items=1600)
    coarse = place_trajectories(lengths, workers, max_items=128)
    assert coarse.items <= 128
    assert exact.makespan <= coarse.makespan <= exact.makespan * 1.05


def test_rejects_bad_input() -> None:
    worker = WorkerCost(MODEL.alpha_curve(3, 1), tau=1.0)
    with pytest.raises(ValueError):
        place_trajectories([1.0, -2.0], [worker])
    with pytest.raises(ValueError):
        place_trajectories([1.0], [])
    with pytest.raises(ValueError):
        WorkerCost(np.array([1.0, 1.0]), tau=1.0)


@pytest.mark.parametrize("seed", range(10))
def test_the_crossing_hint_changes_nothing_on_large_fleets(seed: int) -> None:
    """Identical workers share the previous layer's crossing as a search bound; equal but
    distinct worker objects search from scratch. Both must place alike."""
    import dataclasses

    rng = np.random.default_rng(seed)
    lengths = rng.lognormal(8, 1, 400)
    worker = WorkerCost(random_alpha(rng, 400), tau=0.01)
    hinted = place_trajectories(lengths, homogeneous_workers(worker, 24), max_items=128)
    distinct = [dataclasses.replace(worker) for _ in range(24)]
    plain = place_trajectories(lengths, distinct, max_items=128)
    assert hinted.makespan == pytest.approx(plain.makespan)
    assert hinted.group_sizes == plain.group_sizes


@pytest.mark.parametrize("seed", range(20))
def test_fluid_dp_with_a_context_charge_matches_brute_force_over_contiguous_partitions(
    seed: int,
) -> None:
    rng = np.random.default_rng(300 + seed)
    n, k = int(rng.integers(1, 8)), int(rng.integers(1, 4))
    lengths = rng.lognormal(0, 1, n)
    workers = [
        WorkerCost(
            random_alpha(rng, n),
            tau=float(rng.uniform(0.2, 1.0)),
            batch_limit=int(rng.integers(1, n + 1)) if seed % 3 == 0 else None,
            model="fluid",
            kv_seconds_per_token=float(rng.uniform(0.01, 0.2)),
            kv_capacity_tokens=float(rng.uniform(2.0, 20.0)),
            context_base=float(rng.uniform(0.0, 3.0)),
            context_growth=float(rng.uniform(1.0, 2.0)),
        )
        for _ in range(k)
    ]
    placement = place_trajectories(lengths, workers)
    assert placement.makespan == pytest.approx(brute_force_contiguous(lengths, workers))


def test_the_context_charge_makes_a_long_co_runner_cost_more_than_a_short_one() -> None:
    """Under a size-only α two co-runners cost the lead the same whatever their lengths while
    they outlive it; with the context charge the longer one (more context, read for longer)
    costs more, and the charge is Σ kv · (base·L + growth·L²/2) exactly."""
    alpha = np.array([0.0, 1.0, 1.5])
    plain = WorkerCost(alpha, tau=1.0, model="fluid")
    charged = WorkerCost(alpha, tau=1.0, model="fluid", kv_seconds_per_token=0.01, context_base=2.0)
    lead = 10.0
    with_short, with_long = [lead, 2.0], [lead, 8.0]
    assert group_makespan(with_long, charged) - group_makespan(with_short, charged) > (
        group_makespan(with_long, plain) - group_makespan(with_short, plain)
    )
    reads = sum(2.0 * length + length * length / 2.0 for length in with_long)
    assert group_makespan(with_long, charged) == pytest.approx(
        group_makespan(with_long, plain) + 0.01 * reads
    )


def test_the_kv_pool_floor_binds_when_the_members_contexts_overflow_it() -> None:
    alpha = np.concatenate([[0.0], np.ones(8)])  # no batch-size interference at all
    roomy = WorkerCost(alpha, tau=1.0, model="fluid", kv_seconds_per_token=1e-9)
    tight = WorkerCost(
        alpha, tau=1.0, model="fluid", kv_seconds_per_token=1e-9, kv_capacity_tokens=10.0
    )
    lengths = [4.0] * 8  # each reads 4·4/2 = 8 tokens of its own context over its life
    assert group_makespan(lengths, roomy) == pytest.approx(4.0, rel=1e-6)
    assert group_makespan(lengths, tight) == pytest.approx(8 * 8.0 / 10.0, rel=1e-6)


def test_the_run_encoding_closeness_is_numpys() -> None:
    """``_close`` decides as ``np.isclose(rtol=1e-9, atol=1e-12)`` does, infinities and NaN
    included (the run encoding's boundaries must not move)."""
    from workers.algorithms.heddle.placement import _close

    values = [0.0, 1e-13, 2e-12, 1.0, 1.0 + 5e-10, 1.0 + 2e-9, -1.0, 1e300, math.inf, -math.inf]
    values.append(math.nan)
    for value, reference in itertools.product(values, repeat=2):
        expected = bool(np.isclose(value, reference, rtol=1e-9, atol=1e-12))
        assert _close(value, reference) is expected, (value, reference)
