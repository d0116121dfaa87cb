"""One GRPO batch rolled out on simulated LLM workers, with DARTS's streaming group decisions
(darts Alg. 2) or Tail Batching's stop after the first ``N`` groups (darts App. H).

``pools[i][j]`` is the length sample ``j`` of prompt ``i`` would reach; prompt ``i`` draws
``allocations[i]`` samples. Finished samples stream into one
:class:`~workers.algorithms.darts.GroupRollout` per prompt, whose abort decisions go straight to
the pool (early stop). Every strategy given the same pools sees the same random lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workers.algorithms.darts import GroupRollout
from workers.sim.darts.scenario import ScenarioConfig
from workers.sim.darts.training import Timeline
from workers.sim.events import EventLoop
from workers.sim.llm.cost import ContextCost
from workers.sim.llm.worker import GenerationRequest, GenerationResult, LLMWorker, WorkerPool


@dataclass
class StrategyResult:
    """A batch's outcome; the per-sample arrays are aligned (one entry per submitted sample)."""

    name: str
    rollout_seconds: float
    tokens_generated: int
    samples_submitted: int
    samples_aborted: int
    total_budget: int
    pruned_prompts: int
    kept_lengths: list[int] = field(default_factory=list)
    generated_lengths: list[int] = field(default_factory=list)
    prompt: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    start: np.ndarray = field(default_factory=lambda: np.zeros(0))
    finish: np.ndarray = field(default_factory=lambda: np.zeros(0))
    tokens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    aborted: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    truncated: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    kept: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    target: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    group_done: np.ndarray = field(default_factory=lambda: np.zeros(0))
    completed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    allocations: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    kept_per_group: int = 0

    @property
    def streamable(self) -> np.ndarray:
        """Per sample: its group keeps every candidate (no selection to wait for)."""
        return self.allocations[self.prompt] <= self.kept_per_group

    def timeline(self) -> Timeline:
        return Timeline(
            start=self.start,
            finish=self.finish,
            tokens=self.tokens,
            kept=self.kept,
            streamable=self.streamable,
            group_done=self.group_done,
            rollout_end=self.rollout_seconds,
        )


def make_pool(loop: EventLoop, config: ScenarioConfig) -> WorkerPool:
    """``config.workers`` data-parallel workers on the configured engine."""
    if config.engine == "legacy":
        workers = [
            LLMWorker(loop, w, per_token_seconds=config.ptl, max_batch=config.max_batch)
            for w in range(config.workers)
        ]
    else:
        cost = ContextCost(config.context, config.mp)
        workers = [
            LLMWorker(loop, w, cost=cost, max_batch=config.max_batch, mp=config.mp)
            for w in range(config.workers)
        ]
    return WorkerPool(workers)


def simulate_batch(
    name: str,
    pools: Sequence[np.ndarray],
    allocations: Sequence[int] | np.ndarray,
    config: ScenarioConfig,
    *,
    tail_pruning: bool,
    stop_after_groups: int | None = None,
    prune_at: int | None = None,
) -> StrategyResult:
    """Roll out one batch on a fresh worker pool.

    With ``tail_pruning``, a group allocated at least ``prune_at`` samples (default ``M_up = 2M``,
    Alg. 2) completes at its first ``M`` valid ones and aborts the rest.

    The batch ends when every group is complete, or — Tail Batching — when ``stop_after_groups``
    groups are: every other prompt's running samples are then aborted and the prompt is left
    incomplete (``completed`` false) for its caller to defer.
    """
    loop = EventLoop()
    pool = make_pool(loop, config)
    upper = 2 * config.group_size if prune_at is None else prune_at
    groups = [
        GroupRollout(
            allocated=int(a), group_size=config.group_size, upper=upper, tail_pruning=tail_pruning
        )
        for a in allocations
    ]
    prompts = len(groups)
    done_at = np.full(prompts, np.nan)
    finished_groups = 0
    records: dict[tuple[int, int], GenerationResult] = {}
    stop_time: float | None = None

    def stop_the_rest() -> None:
        for prompt, group in enumerate(groups):
            if np.isnan(done_at[prompt]):
                for sample in range(group.allocated):
                    if (prompt, sample) not in records:
                        pool.abort(f"{prompt}-{sample}")

    def on_done(result: GenerationResult) -> None:
        nonlocal finished_groups, stop_time
        prompt, sample = result.tag
        records[(prompt, sample)] = result
        if result.aborted or stop_time is not None:
            return
        truncated = result.output_tokens >= config.max_length
        decision = groups[prompt].sample_finished(sample, result.output_tokens, truncated)
        for running in decision.abort:
            pool.abort(f"{prompt}-{running}")
        if decision.complete and np.isnan(done_at[prompt]):
            done_at[prompt] = loop.now
            finished_groups += 1
            if stop_after_groups is not None and finished_groups >= stop_after_groups:
                stop_time = loop.now
                stop_the_rest()

    # Interleave prompts so every worker gets a share of each group, as a least-loaded router does.
    most = max(int(a) for a in allocations)
    for sample in range(most):
        for prompt, allocated in enumerate(allocations):
            if sample < allocated:
                pool.submit(
                    GenerationRequest(
                        f"{prompt}-{sample}",
                        output_tokens=int(pools[prompt][sample]),
                        context_tokens=config.prompt_tokens,
                        on_done=on_done,
                        tag=(prompt, sample),
                    )
                )
    loop.run()
    return _collect(name, pools, allocations, config, groups, records, done_at)


def _collect(
    name: str,
    pools: Sequence[np.ndarray],
    allocations: Sequence[int] | np.ndarray,
    config: ScenarioConfig,
    groups: list[GroupRollout],
    records: dict[tuple[int, int], GenerationResult],
    done_at: np.ndarray,
) -> StrategyResult:
    completed = ~np.isnan(done_at)
    kept_pairs = {(i, s) for i, g in enumerate(groups) if completed[i] for s in g.kept()}
    keys = sorted(records)
    prompt = np.array([k[0] for k in keys], dtype=np.int64)
    results = [records[k] for k in keys]
    tokens = np.array([r.output_tokens for r in results], dtype=np.int64)
    aborted = np.array([r.aborted for r in results], dtype=bool)
    finish = np.array([r.finished_at for r in results])
    start = np.array(
        [r.finished_at if r.first_scheduled_at is None else r.first_scheduled_at for r in results]
    )
    kept = np.array([k in kept_pairs for k in keys], dtype=bool)
    target = np.array([int(pools[i][s]) for i, s in keys], dtype=np.int64)
    group_done = np.where(completed, done_at, np.nan)[prompt]
    rollout_end = float(np.nanmax(done_at)) if completed.any() else 0.0
    return StrategyResult(
        name=name,
        rollout_seconds=rollout_end,
        tokens_generated=int(tokens.sum()),
        samples_submitted=int(np.sum(allocations)),
        samples_aborted=int(aborted.sum()),
        total_budget=int(np.sum(allocations)),
        pruned_prompts=sum(1 for i, g in enumerate(groups) if completed[i] and g.aborted),
        kept_lengths=[int(t) for t in tokens[kept]],
        generated_lengths=[int(t) for t in tokens],
        prompt=prompt,
        start=start,
        finish=finish,
        tokens=tokens,
        aborted=aborted,
        truncated=~aborted & (tokens >= config.max_length),
        kept=kept,
        target=target,
        group_done=np.nan_to_num(group_done, nan=rollout_end),
        completed=completed,
        allocations=np.asarray(allocations, dtype=np.int64),
        kept_per_group=config.group_size,
    )
