"""Trajectory-adaptive resource plan: sort-initialised simulated annealing (heddle §6.2, Alg. 2).

A plan is a multiset of model-parallel degrees ``m_k`` (from ``MP_DEGREES``) summing to the GPU
budget. Mapping (§6.2 "Mapping"): workers are sorted by degree, descending, and the presorted
trajectory partitions map onto them in that order, so the longest trajectories get the highest MP.
Each plan is scored with the heterogeneous presorted DP (formula 3 with per-worker α_k, τ_k).
Annealing: start from a random allocation sorted descending, temperature = its score, perturb by
one of redistribute / split / merge, accept improvements always and regressions with probability
``exp(−Δ/T)``, cool geometrically, stop when ``T < min_temperature_ratio · T0``.

Score = DP makespan + ``tie_weight`` × the mean group cost. Formula 2 only sees the slowest group,
so once the longest trajectory sits on the fastest worker many plans tie (Fix-8 included) even
though they differ in how fast everything else drains; the small second term (≤ ``tie_weight`` of
the makespan) breaks those ties toward plans that also serve the short trajectories quickly.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from workers.algorithms.heddle.latency_model import MP_DEGREES, MPLatencyModel
from workers.algorithms.heddle.placement import (
    GroupModel,
    Placement,
    WorkerCost,
    place_trajectories,
)


@dataclass(frozen=True)
class ParallelismPlan:
    degrees: tuple[int, ...]
    placement: Placement
    makespan: float
    evaluations: int = 1
    iterations: int = 0


def worker_cost(
    model: MPLatencyModel,
    mp: int,
    trajectories: int,
    *,
    batch_limit: int | None = None,
    group_limit: int | None = None,
    group_model: GroupModel = "fluid",
    prefill_tokens_per_trajectory: float = 0.0,
    context: ContextGrowth | None = None,
) -> WorkerCost:
    """The DP's view of one MP-``mp`` worker: α from the PTL curve (``relative_to(1)``), τ(m).

    The paper model charges queueing through α (``alpha_curve``'s ``batch_limit``); the fluid
    model charges it itself, so it gets the plain interference curve. Each member's prefills
    (``prefill_tokens_per_trajectory``) stall the worker's batch: an additive per-member cost.
    ``context`` (fluid model, a model with a KV profile for ``mp``): the context charge of
    :class:`~workers.algorithms.heddle.placement.WorkerCost`."""
    alpha = model.alpha_curve(trajectories, mp, batch_limit if group_model == "paper" else None)
    kv = model.kv_terms(mp) if context is not None and group_model == "fluid" else None
    return WorkerCost(
        alpha=alpha,
        tau=model.tau(mp),
        batch_limit=batch_limit,
        group_limit=group_limit,
        model=group_model,
        overhead_per_trajectory=model.prefill_seconds(prefill_tokens_per_trajectory, mp),
        kv_seconds_per_token=0.0 if kv is None or context is None else kv[0],
        kv_capacity_tokens=float("inf") if kv is None else kv[1],
        context_base=0.0 if context is None else context.base_tokens,
        context_growth=1.0 if context is None else context.growth,
    )


@dataclass(frozen=True)
class ContextGrowth:
    """How a trajectory's context grows as it decodes (placement's context charge): it starts at
    ``base_tokens`` (the prompt) and every generated token brings ``growth`` tokens of context
    (itself plus its share of the tool outputs the steps bring back)."""

    base_tokens: float
    growth: float


class _Scorer:
    """Memoised DP score of a sorted degree tuple."""

    def __init__(
        self,
        lengths: np.ndarray,
        model: MPLatencyModel,
        degrees: Sequence[int],
        batch_limit_per_gpu: int | None,
        max_items: int,
        group_limit_per_gpu: int | None = None,
        group_model: GroupModel = "fluid",
        prefill_tokens_per_trajectory: float = 0.0,
        context: ContextGrowth | None = None,
        batch_limits: Mapping[int, int] | None = None,
    ) -> None:
        self.lengths = lengths
        self.max_items = max_items
        n = len(lengths)
        self.costs = {
            m: worker_cost(
                model,
                m,
                n,
                batch_limit=_batch_limit(m, batch_limit_per_gpu, batch_limits),
                group_limit=None if group_limit_per_gpu is None else group_limit_per_gpu * m,
                group_model=group_model,
                prefill_tokens_per_trajectory=prefill_tokens_per_trajectory,
                context=context,
            )
            for m in degrees
        }
        self.cache: dict[tuple[int, ...], Placement] = {}

    def score(self, plan: tuple[int, ...], tie_weight: float) -> float:
        placement = self(plan)
        return placement.makespan + tie_weight * float(np.mean(placement.group_costs))

    def __call__(self, plan: tuple[int, ...]) -> Placement:
        if plan not in self.cache:
            self.cache[plan] = place_trajectories(
                self.lengths, [self.costs[m] for m in plan], max_items=self.max_items
            )
        return self.cache[plan]


def _batch_limit(mp: int, per_gpu: int | None, by_degree: Mapping[int, int] | None) -> int | None:
    if by_degree is not None and mp in by_degree:
        return by_degree[mp]
    return None if per_gpu is None else per_gpu * mp


def _random_sorted_allocation(budget: int, degrees: Sequence[int], rng: random.Random) -> list[int]:
    plan: list[int] = []
    left = budget
    while left > 0:
        choices = [d for d in degrees if d <= left]
        pick = rng.choice(choices)
        plan.append(pick)
        left -= pick
    return sorted(plan, reverse=True)


def _neighbour(
    plan: list[int], degrees: Sequence[int], rng: random.Random
) -> tuple[int, ...] | None:
    """One random redistribute / split / merge move (§6.2); ``None`` if it was not applicable."""
    allowed = set(degrees)
    move = rng.randrange(3)
    new = list(plan)
    if move == 0 and len(new) >= 2:  # redistribute: half of one worker's GPUs to another
        i, j = rng.sample(range(len(new)), 2)
        half = new[i] // 2
        if new[i] < 2 or new[j] + half not in allowed or half not in allowed:
            return None
        new[i] -= half
        new[j] += half
    elif move == 1:  # split one worker into two of half the degree
        i = rng.randrange(len(new))
        half = new[i] // 2
        if new[i] < 2 or half not in allowed:
            return None
        new[i] = half
        new.append(half)
    else:  # merge two workers of equal degree
        by_degree: dict[int, list[int]] = {}
        for index, d in enumerate(new):
            by_degree.setdefault(d, []).append(index)
        pairs = [d for d, idx in by_degree.items() if len(idx) >= 2 and 2 * d in allowed]
        if not pairs:
            return None
        d = rng.choice(pairs)
        first, second = by_degree[d][:2]
        new[first] = 2 * d
        del new[second]
    return tuple(sorted(new, reverse=True))


def plan_parallelism(
    predicted_lengths: Sequence[float] | np.ndarray,
    gpu_budget: int,
    model: MPLatencyModel,
    *,
    degrees: Sequence[int] = MP_DEGREES,
    batch_limit_per_gpu: int | None = None,
    group_limit_per_gpu: int | None = None,
    seed: int = 0,
    cooling: float = 0.9,
    min_temperature_ratio: float = 1e-3,
    moves_per_temperature: int = 4,
    max_items: int = 96,
    tie_weight: float = 0.05,
    group_model: GroupModel = "fluid",
    prefill_tokens_per_trajectory: float = 0.0,
    context: ContextGrowth | None = None,
    batch_limits: Mapping[int, int] | None = None,
) -> ParallelismPlan:
    """Sort-initialised simulated annealing over MP degrees under ``gpu_budget`` GPUs.

    ``batch_limits``: each degree's running-batch cap where it is not ``m ×`` the per-GPU one
    (a KV pool that grows faster than the GPU count: the weights are split), so the annealer
    scores a plan with the same caps the dispatch-time placement uses."""
    if gpu_budget < min(degrees):
        raise ValueError(f"budget {gpu_budget} is below the smallest MP degree {min(degrees)}")
    lengths = np.asarray(predicted_lengths, dtype=float)
    rng = random.Random(seed)
    if group_limit_per_gpu is not None and group_limit_per_gpu * gpu_budget < len(lengths):
        raise ValueError("the GPU budget's group limits cannot hold every trajectory")
    scorer = _Scorer(
        lengths,
        model,
        degrees,
        batch_limit_per_gpu,
        max_items,
        group_limit_per_gpu,
        group_model,
        prefill_tokens_per_trajectory,
        context,
        batch_limits,
    )
    current = tuple(_random_sorted_allocation(gpu_budget, degrees, rng))
    current_score = scorer.score(current, tie_weight)
    best, best_score = current, current_score
    initial_temperature = temperature = max(current_score, 1e-12)
    iterations = 0
    while temperature > min_temperature_ratio * initial_temperature:
        for _ in range(moves_per_temperature):
            iterations += 1
            candidate = None
            for _attempt in range(8):  # draw moves until one applies to this plan
                candidate = _neighbour(list(current), degrees, rng)
                if candidate is not None:
                    break
            if candidate is None:
                continue
            score = scorer.score(candidate, tie_weight)
            delta = score - current_score
            if delta < 0 or rng.random() < math.exp(-delta / temperature):
                current, current_score = candidate, score
                if score < best_score:
                    best, best_score = candidate, score
        temperature *= cooling
    return ParallelismPlan(
        degrees=best,
        placement=scorer(best),
        makespan=scorer(best).makespan,
        evaluations=len(scorer.cache),
        iterations=iterations,
    )


def homogeneous_plan(
    predicted_lengths: Sequence[float] | np.ndarray,
    gpu_budget: int,
    mp: int,
    model: MPLatencyModel,
    *,
    batch_limit_per_gpu: int | None = None,
    group_limit_per_gpu: int | None = None,
    max_items: int = 256,
    group_model: GroupModel = "fluid",
) -> ParallelismPlan:
    """Fix-m: ``gpu_budget // mp`` identical workers, placed with the same DP (the baselines)."""
    if gpu_budget < mp:
        raise ValueError(f"budget {gpu_budget} is below MP degree {mp}")
    lengths = np.asarray(predicted_lengths, dtype=float)
    scorer = _Scorer(
        lengths, model, [mp], batch_limit_per_gpu, max_items, group_limit_per_gpu, group_model
    )
    plan = tuple([mp] * (gpu_budget // mp))
    placement = scorer(plan)
    return ParallelismPlan(degrees=plan, placement=placement, makespan=placement.makespan)
