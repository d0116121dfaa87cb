"""Heavy-tailed single-turn GRPO rollout on simulated LLM workers (darts §3.2, §4, §5.4).

Prompts have per-prompt length distributions of three kinds (§3.2.2): *concise* (short, low
spread), *verbose-tail* (mostly short, with a heavy verbose tail — Pattern I) and
*necessary-tail* (long everywhere, some reaching the length limit — Pattern II). One batch is
rolled out on a :class:`workers.sim.llm.worker.WorkerPool` (continuous batching, per-token time
from the PTL curve, abort of running requests) under four strategies:

- ``standard``: GRPO, ``M`` samples per prompt, keep all;
- ``uniform``: the same total budget as DARTS spread evenly, dual-end selection, no early stop;
- ``darts_no_pruning``: DARTS budget and variance-based allocation, dual-end everywhere;
- ``darts``: DARTS with tail pruning and early stop (Alg. 2).

Every strategy sees the same random lengths (sample ``j`` of prompt ``i`` is one draw shared by
all), so differences come from the strategy alone. The DARTS decisions come from
``workers.algorithms.darts`` — the same code the shaper service and the GRPO lab use.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workers.algorithms.darts import (
    DartsConfig,
    GroupRollout,
    InMemoryLengthVarianceStore,
    LengthMomentsEMA,
    budget_cost_slope,
    plan_batch,
    smoothed_stds,
)
from workers.algorithms.latency import DEFAULT_PTL_TP1, ThreePieceLinear
from workers.sim.events import EventLoop
from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker, WorkerPool


class PromptKind(enum.Enum):
    CONCISE = "concise"
    VERBOSE_TAIL = "verbose_tail"
    NECESSARY_TAIL = "necessary_tail"


@dataclass(frozen=True)
class PromptProfile:
    """One prompt's response-length distribution (log-normal body, optional heavy tail)."""

    kind: PromptKind
    median: float
    spread: float
    tail_probability: float = 0.0
    tail_median: float = 0.0

    def draw(self, count: int, rng: np.random.Generator, max_length: int) -> np.ndarray:
        body = rng.lognormal(np.log(self.median), self.spread, count)
        tail = rng.lognormal(np.log(max(self.tail_median, 1.0)), 0.5, count)
        in_tail = rng.random(count) < self.tail_probability
        lengths = np.where(in_tail, tail, body)
        return np.clip(np.rint(lengths), 1, max_length).astype(np.int64)


@dataclass(frozen=True)
class ScenarioConfig:
    prompts: int = 64
    group_size: int = 8
    workers: int = 4
    max_batch: int = 256
    max_length: int = 8192
    concise_fraction: float = 0.6
    verbose_fraction: float = 0.3
    history_epochs: int = 2
    budget_target_multiple: float = 1.5
    ptl: ThreePieceLinear = DEFAULT_PTL_TP1


def make_prompt_set(config: ScenarioConfig, rng: np.random.Generator) -> list[PromptProfile]:
    """Concise, verbose-tail and necessary-tail prompts in the configured proportions (§3.2)."""
    profiles: list[PromptProfile] = []
    concise = round(config.prompts * config.concise_fraction)
    verbose = round(config.prompts * config.verbose_fraction)
    for index in range(config.prompts):
        if index < concise:
            profiles.append(
                PromptProfile(PromptKind.CONCISE, median=rng.uniform(300, 900), spread=0.35)
            )
        elif index < concise + verbose:
            profiles.append(
                PromptProfile(
                    PromptKind.VERBOSE_TAIL,
                    median=rng.uniform(400, 1000),
                    spread=0.4,
                    tail_probability=rng.uniform(0.15, 0.35),
                    tail_median=rng.uniform(3500, 6000),
                )
            )
        else:
            profiles.append(
                PromptProfile(PromptKind.NECESSARY_TAIL, median=rng.uniform(2500, 4000), spread=0.6)
            )
    order = rng.permutation(len(profiles))
    return [profiles[i] for i in order]


@dataclass
class StrategyResult:
    name: str
    rollout_seconds: float
    tokens_generated: int
    samples_submitted: int
    samples_aborted: int
    total_budget: int
    pruned_prompts: int
    kept_lengths: list[int] = field(default_factory=list)
    generated_lengths: list[int] = field(default_factory=list)


def simulate_batch(
    name: str,
    pools: Sequence[np.ndarray],
    allocations: Sequence[int] | np.ndarray,
    config: ScenarioConfig,
    *,
    tail_pruning: bool,
) -> StrategyResult:
    """Roll out one batch on a fresh worker pool; the batch ends when every group is complete.

    ``pools[i][j]`` is the length sample ``j`` of prompt ``i`` would reach; prompt ``i`` draws
    ``allocations[i]`` samples. Finished samples stream into one :class:`GroupRollout` per prompt,
    whose abort decisions go straight to the pool (early stop).
    """
    loop = EventLoop()
    pool = WorkerPool(
        [
            LLMWorker(loop, w, per_token_seconds=config.ptl, max_batch=config.max_batch)
            for w in range(config.workers)
        ]
    )
    upper = 2 * config.group_size
    groups = [
        GroupRollout(
            allocated=int(a), group_size=config.group_size, upper=upper, tail_pruning=tail_pruning
        )
        for a in allocations
    ]
    completed_at = np.zeros(len(groups))
    generated: list[int] = []
    aborted = 0

    def on_done(result: GenerationResult) -> None:
        nonlocal aborted
        prompt, sample = result.tag
        generated.append(result.output_tokens)
        if result.aborted:
            aborted += 1
            return
        truncated = result.output_tokens >= config.max_length
        decision = groups[prompt].sample_finished(sample, result.output_tokens, truncated)
        for running in decision.abort:
            pool.abort(f"{prompt}-{running}")
        if decision.complete and completed_at[prompt] == 0.0:
            completed_at[prompt] = loop.now

    # Interleave prompts so every worker gets a share of each group, as a least-loaded router does.
    most = max(int(a) for a in allocations)
    for sample in range(most):
        for prompt, allocated in enumerate(allocations):
            if sample < allocated:
                pool.submit(
                    GenerationRequest(
                        f"{prompt}-{sample}",
                        output_tokens=int(pools[prompt][sample]),
                        on_done=on_done,
                        tag=(prompt, sample),
                    )
                )
    loop.run()
    kept = [int(pools[i][s]) for i, g in enumerate(groups) for s in g.kept()]
    return StrategyResult(
        name=name,
        rollout_seconds=float(completed_at.max()),
        tokens_generated=int(sum(generated)),
        samples_submitted=int(sum(allocations)),
        samples_aborted=aborted,
        total_budget=int(sum(allocations)),
        pruned_prompts=sum(1 for g in groups if g.aborted),
        kept_lengths=kept,
        generated_lengths=generated,
    )


def uniform_allocation(prompts: int, total_budget: int, upper: int) -> np.ndarray:
    """``total_budget`` spread as evenly as possible (the first prompts take the remainder)."""
    base, remainder = divmod(total_budget, prompts)
    allocation = np.full(prompts, base, dtype=np.int64)
    allocation[:remainder] += 1
    return np.minimum(allocation, upper)


@dataclass
class BatchComparison:
    strategies: dict[str, StrategyResult]
    kinds: list[str]
    allocations: list[int]


def run_batch(
    config: ScenarioConfig, rng: np.random.Generator, profiles: Sequence[PromptProfile]
) -> BatchComparison:
    """History epochs feed the variance store and length moments; then one batch, four ways."""
    store = InMemoryLengthVarianceStore()
    moments = LengthMomentsEMA()
    keys = list(range(len(profiles)))
    trade_off: float | None = None
    slope = 0.0
    for _ in range(config.history_epochs):
        epoch = [p.draw(config.group_size, rng, config.max_length) for p in profiles]
        for key, lengths in zip(keys, epoch, strict=True):
            store.observe(key, lengths)
        moments.update(np.concatenate(epoch))
        assert moments.mean is not None and moments.std is not None
        slope = budget_cost_slope(
            mean_length=moments.mean,
            std_length=moments.std,
            prompts=config.prompts,
            group_size=config.group_size,
            workers=config.workers,
            ptl=config.ptl,
        )
        if trade_off is None:
            # λ calibrated once on the first history epoch to a ~1.5·N·M budget (App. B reports
            # that as the solved average); later budgets follow Eq. 9 with that λ.
            target = config.budget_target_multiple * config.prompts * config.group_size
            trade_off = moments.rho / (target * slope) if slope > 0 else 0.0

    upper = 2 * config.group_size
    pools = [p.draw(upper, rng, config.max_length) for p in profiles]
    stds = smoothed_stds(store, keys)
    darts = DartsConfig(group_size=config.group_size, trade_off=trade_off or 0.0)
    plan = plan_batch(stds, config=darts, rho=moments.rho, cost_slope=slope)
    standard = np.full(len(profiles), config.group_size)
    uniform = uniform_allocation(len(profiles), plan.total_budget, upper)
    results = [
        simulate_batch("standard", pools, standard, config, tail_pruning=False),
        simulate_batch("uniform", pools, uniform, config, tail_pruning=False),
        simulate_batch("darts_no_pruning", pools, plan.allocations, config, tail_pruning=False),
        simulate_batch("darts", pools, plan.allocations, config, tail_pruning=True),
    ]
    return BatchComparison(
        strategies={r.name: r for r in results},
        kinds=[p.kind.value for p in profiles],
        allocations=[int(a) for a in plan.allocations],
    )
