"""One epoch of GRPO steps on the same prompt stream under each strategy (darts §4–§5, App. H).

- ``standard``: GRPO (VeRL), ``M`` samples per prompt, keep all, sample-level streaming;
- ``standard_token`` / ``standard_none``: the same rollouts with token-level streaming (darts
  Tab. 3's first ablation row) and with no streaming;
- ``uniform``: DARTS's budget spread evenly, dual-end selection (Tab. 3's second row);
- ``darts_no_pruning``: DARTS's budget and Alg. 1 allocation, dual-end everywhere;
- ``darts``: DARTS with tail pruning and early stop (Alg. 2) and token-level streaming;
- ``darts_sample``: the same rollouts handed to the trainer by sample-level streaming;
- ``darts_per_step_k``: the earlier budget rule kept beside the new one — ``k`` re-derived every
  step from that step's mean length and the moments from finished samples only;
- ``darts_pool_moments``: ``darts`` with ``ρ_t``'s moments over the candidate pools as drawn,
  every sample weighing the same (the rule before ``darts`` weighed each prompt equally);
- ``tail_batching@r``: Tail Batching at ``N' = r·N`` (:mod:`workers.sim.darts.tail_batching`);
- ``tail_batching@rxs``: the same with RollPacker's response over-provisioning in short rounds
  (``round(s·M)`` candidates per prompt, the first ``M`` finished kept);
- ``darts_fixed@x``: DARTS with ``M_total = x·N·M`` every step (``config.fixed_budget_multiples``),
  the same allocation rule, pruning and early stop: how the pruned share and the step time follow
  the budget.

DARTS's budget (App. B): ``k`` from the PTL curve (the legacy engine's, or one profiled from the
context engine at the workload's mean context) and the cluster once, λ calibrated so the first
step's budget is ``budget_target_multiple·N·M``; after each step ``ρ_t``'s moments take that
step's lengths, aborted and length-capped ones as censored (Kaplan–Meier), each prompt's
candidates weighted ``1/M'_i``. ``ρ_t`` is a dataset-level statistic (App. B); Alg. 1 gives the
high-variance prompts up to twice the candidates, and unweighted pools would measure the
allocation's own tilt toward them rather than the dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workers.algorithms.darts import (
    DartsConfig,
    InMemoryLengthVarianceStore,
    LengthMomentsEMA,
    budget_cost_slope,
    calibrate_trade_off,
    censored_moments,
    plan_batch,
    smoothed_stds,
)
from workers.algorithms.latency import ThreePieceLinear, fit_three_piece_linear
from workers.sim.darts.rollout import StrategyResult, simulate_batch
from workers.sim.darts.scenario import PromptProfile, ScenarioConfig, uniform_allocation
from workers.sim.darts.tail_batching import run_tail_batching
from workers.sim.darts.training import Streaming, step_seconds
from workers.sim.llm.profiler import profiled_batches


@dataclass
class EpochSeries:
    """Per strategy, per training step: wall time, rollout time and the batch's outcome."""

    step_seconds: dict[str, list[float]] = field(default_factory=dict)
    rollout_seconds: dict[str, list[float]] = field(default_factory=dict)
    results: dict[str, list[StrategyResult]] = field(default_factory=dict)
    budgets: dict[str, list[int]] = field(default_factory=dict)
    censoring: list[dict[str, float]] = field(default_factory=list)
    cost_slope: float = 0.0
    trade_off: float = 0.0
    ptl: ThreePieceLinear | None = None

    def add(self, name: str, result: StrategyResult, seconds: float) -> None:
        self.step_seconds.setdefault(name, []).append(seconds)
        self.rollout_seconds.setdefault(name, []).append(result.rollout_seconds)
        self.results.setdefault(name, []).append(result)


def planning_ptl(config: ScenarioConfig, mean_length: float) -> ThreePieceLinear:
    """The PTL curve DARTS's cost model uses (darts App. A): the legacy engine's own curve, or a
    three-piece fit of the context engine profiled with every request at the mean context."""
    if config.engine == "legacy":
        return config.ptl
    context = config.prompt_tokens + mean_length / 2.0
    batches = profiled_batches(config.max_batch)
    seconds = [config.context.step_seconds(config.mp, int(b), b * context) for b in batches]
    return fit_three_piece_linear(batches, seconds)


def timed(
    result: StrategyResult, config: ScenarioConfig, mode: Streaming
) -> tuple[StrategyResult, float]:
    return result, step_seconds(mode, config.trainer, result.timeline())


def observed_lengths(result: StrategyResult) -> tuple[np.ndarray, np.ndarray]:
    """All lengths this batch revealed, and which are lower bounds (aborted or length-capped)."""
    return result.tokens.astype(float), result.aborted | result.truncated


class _Budget:
    """DARTS's App. B state: moments, the variance store, ``k`` and λ."""

    def __init__(
        self, config: ScenarioConfig, per_step_k: bool, prompt_weighted: bool = True
    ) -> None:
        self.config = config
        self.per_step_k = per_step_k
        self.prompt_weighted = prompt_weighted
        self.moments = LengthMomentsEMA()
        self.slope = 0.0
        self.trade_off: float | None = None
        self.ptl: ThreePieceLinear | None = None

    def slope_now(self) -> float:
        assert self.moments.mean is not None and self.moments.std is not None
        if self.ptl is None:
            self.ptl = planning_ptl(self.config, self.moments.mean)
        return budget_cost_slope(
            mean_length=self.moments.mean,
            std_length=self.moments.std,
            prompts=self.config.prompts,
            group_size=self.config.group_size,
            workers=self.config.workers,
            ptl=self.ptl,
        )

    def history(self, lengths: np.ndarray, first: bool) -> None:
        self.moments.update(lengths)
        if self.per_step_k:
            # The earlier rule: λ fixed on the first history epoch, k re-derived at every epoch.
            self.slope = self.slope_now()
            if first:
                self.trade_off = self._calibrate()
        elif first:
            self.slope = self.slope_now()

    def _calibrate(self) -> float:
        target = self.config.budget_target_multiple * self.config.prompts * self.config.group_size
        return calibrate_trade_off(
            rho=self.moments.rho, cost_slope=self.slope, target_budget=target
        )

    def start_epoch(self) -> None:
        if self.trade_off is None:
            self.trade_off = self._calibrate()

    def observe(self, result: StrategyResult) -> None:
        lengths, censored = observed_lengths(result)
        if self.per_step_k:
            self.moments.update(lengths[~censored])
            self.slope = self.slope_now()
        elif self.prompt_weighted:
            weights = 1.0 / result.allocations[result.prompt].astype(float)
            self.moments.update(lengths, censored, weights)
        else:
            self.moments.update(lengths, censored)


def run_epoch(
    config: ScenarioConfig,
    rng: np.random.Generator,
    profiles: Sequence[PromptProfile],
    *,
    strategies: Sequence[str] | None = None,
) -> EpochSeries:
    """History epochs feed the variance store and moments; then ``config.steps`` steps of
    ``config.prompts`` prompts each, every strategy on the same draws."""
    n, m = config.prompts, config.group_size
    if len(profiles) != n * config.steps:
        raise ValueError("need prompts × steps profiles")
    store = InMemoryLengthVarianceStore()
    budgets = {"darts": _Budget(config, per_step_k=False)}
    wanted = set(strategies) if strategies is not None else None
    if wanted is None or "darts_pool_moments" in wanted:
        budgets["darts_pool_moments"] = _Budget(config, per_step_k=False, prompt_weighted=False)
    if wanted is None or "darts_per_step_k" in wanted:
        budgets["darts_per_step_k"] = _Budget(config, per_step_k=True)
    for epoch in range(config.history_epochs):
        draws = [p.draw(m, rng, config.max_length) for p in profiles]
        for key, lengths in enumerate(draws):
            store.observe(key, lengths)
        for budget in budgets.values():
            budget.history(np.concatenate(draws).astype(float), first=epoch == 0)
    for budget in budgets.values():
        budget.start_epoch()
    pools = [p.draw(2 * m, rng, config.max_length) for p in profiles]
    series = EpochSeries(
        cost_slope=budgets["darts"].slope,
        trade_off=budgets["darts"].trade_off or 0.0,
        ptl=budgets["darts"].ptl,
    )

    def want(name: str) -> bool:
        return wanted is None or name in wanted

    for step in range(config.steps):
        keys = list(range(step * n, (step + 1) * n))
        step_pools = [pools[k] for k in keys]
        stds = smoothed_stds(store, keys)
        plans = {}
        for name, budget in budgets.items():
            darts = DartsConfig(group_size=m, trade_off=budget.trade_off or 0.0)
            plans[name] = plan_batch(
                stds, config=darts, rho=budget.moments.rho, cost_slope=budget.slope
            )
            series.budgets.setdefault(name, []).append(plans[name].total_budget)
        plan = plans["darts"]
        standard = np.full(n, m)
        runs: list[tuple[str, np.ndarray, bool, list[tuple[str, Streaming]]]] = [
            (
                "standard",
                standard,
                False,
                [
                    ("standard", config.baseline_streaming),
                    ("standard_token", "token"),
                    ("standard_none", "none"),
                ],
            ),
            (
                "uniform",
                uniform_allocation(n, plan.total_budget, 2 * m),
                False,
                [("uniform", config.darts_streaming)],
            ),
            (
                "darts_no_pruning",
                plan.allocations,
                False,
                [("darts_no_pruning", config.darts_streaming)],
            ),
            (
                "darts",
                plan.allocations,
                True,
                [("darts", config.darts_streaming), ("darts_sample", config.baseline_streaming)],
            ),
        ]
        for multiple in config.fixed_budget_multiples:
            name = f"darts_fixed@{multiple:g}"
            if not want(name):
                continue
            fixed = plan_batch(
                stds,
                config=DartsConfig(group_size=m),
                rho=0.0,
                cost_slope=1.0,
                total_budget=round(multiple * n * m),
            )
            series.budgets.setdefault(name, []).append(fixed.total_budget)
            runs.append((name, fixed.allocations, True, [(name, config.darts_streaming)]))
        for other in ("darts_pool_moments", "darts_per_step_k"):
            if other in plans:
                runs.append(
                    (other, plans[other].allocations, True, [(other, config.darts_streaming)])
                )
        for rollout_name, allocations, pruning, views in runs:
            if not any(want(v) for v, _ in views):
                continue
            result = simulate_batch(
                rollout_name, step_pools, allocations, config, tail_pruning=pruning
            )
            for view, mode in views:
                if want(view):
                    series.add(view, *timed(result, config, mode))
            if rollout_name in budgets:
                if rollout_name == "darts":
                    series.censoring.append(_censoring_check(result))
                budgets[rollout_name].observe(result)
    if wanted is None or any(w.startswith("tail_batching") for w in wanted):
        # Drawn last, so every other strategy's draws are those of a run without them.
        recompute_pools = (
            [p.draw(m, rng, config.max_length) for p in profiles]
            if any(r > 1.0 for r in config.tail_response_overprovision)
            else None
        )
        for response_ratio in config.tail_response_overprovision:
            for ratio in config.tail_overprovision:
                name = tail_batching_name(ratio, response_ratio)
                if not want(name):
                    continue
                rounds = run_tail_batching(
                    config,
                    pools,
                    ratio,
                    response_ratio=response_ratio,
                    recompute_pools=recompute_pools,
                )
                for result in rounds:
                    series.add(name, *timed(result, config, config.baseline_streaming))
    return series


def tail_batching_name(ratio: float, response_ratio: float = 1.0) -> str:
    """``tail_batching@r`` (App. H: prompts over-provisioned ``r``-fold) or
    ``tail_batching@r×s`` (RollPacker's short rounds: responses too, ``s``-fold)."""
    if response_ratio == 1.0:
        return f"tail_batching@{ratio:g}"
    return f"tail_batching@{ratio:g}x{response_ratio:g}"


def _censoring_check(result: StrategyResult) -> dict[str, float]:
    """The batch's mean length three ways: what its samples would have reached (known only to
    the simulator), the Kaplan–Meier estimate, and finished samples alone."""
    lengths, censored = observed_lengths(result)
    km_mean, km_std = censored_moments(lengths, censored)
    finished = lengths[~censored]
    return {
        "true_mean": float(result.target.mean()),
        "true_std": float(result.target.std()),
        "km_mean": km_mean,
        "km_std": km_std,
        "finished_mean": float(finished.mean()) if finished.size else 0.0,
        "finished_std": float(finished.std()) if finished.size else 0.0,
        "censored_share": float(censored.mean()),
    }
