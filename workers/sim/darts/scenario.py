"""Heavy-tailed single-turn GRPO prompts and the cluster they roll out on (darts §3.2, §5).

Prompts have per-prompt length distributions of three kinds (§3.2.2): *concise* (short, low
spread), *verbose-tail* (mostly short, with a heavy verbose tail — Pattern I) and
*necessary-tail* (long everywhere, some reaching the length limit — Pattern II). The rollout of a
batch is :mod:`workers.sim.darts.rollout`; the strategies compared over an epoch are
:mod:`workers.sim.darts.epoch`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from workers.algorithms.latency import DEFAULT_PTL_TP1, ThreePieceLinear
from workers.sim.darts.training import Streaming, TrainerModel
from workers.sim.llm.latency import ContextLatencyModel

EngineName = Literal["legacy", "context"]


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
    """One epoch of ``steps`` GRPO steps of ``prompts`` prompts × ``group_size`` samples.

    ``engine``: ``"legacy"`` (per-token time from the batch size only, ``ptl``) or ``"context"``
    (:class:`~workers.sim.llm.latency.ContextLatencyModel` at MP ``mp``: per-token time rising
    with the batch's KV tokens, chunked prefill, a bounded KV pool). ``prompt_tokens``: every
    prompt's context (our assumption: math prompts are short beside their responses).
    ``tail_overprovision``: Tail Batching's ``N'/N`` settings; ``tail_response_overprovision``:
    its responses-per-prompt over-provisioning in short rounds (1: App. H's prompt-level form;
    RollPacker's released configuration uses 1.25 for both). The best of the grid is its result.
    ``fixed_budget_multiples``: DARTS (allocation, tail pruning, early stop) at ``M_total`` fixed
    to these multiples of ``N·M`` instead of Eq. 9's, one arm each (a sweep, not a baseline).
    ``streaming``: how each system hands rollout output to the trainer.
    """

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
    engine: EngineName = "legacy"
    mp: int = 1
    context: ContextLatencyModel = field(default_factory=ContextLatencyModel)
    prompt_tokens: int = 0
    steps: int = 16
    tail_overprovision: tuple[float, ...] = (1.125, 1.25, 1.5, 2.0, 3.0)
    tail_response_overprovision: tuple[float, ...] = (1.0, 1.125, 1.25, 1.5, 2.0)
    fixed_budget_multiples: tuple[float, ...] = ()
    trainer: TrainerModel = field(default_factory=TrainerModel)
    baseline_streaming: Streaming = "sample"
    darts_streaming: Streaming = "token"


def make_prompt_set(
    config: ScenarioConfig, rng: np.random.Generator, count: int | None = None
) -> list[PromptProfile]:
    """``count`` (default ``config.prompts``) prompts of the three kinds in the configured
    proportions (§3.2), in random order."""
    total = config.prompts if count is None else count
    profiles: list[PromptProfile] = []
    concise = round(total * config.concise_fraction)
    verbose = round(total * config.verbose_fraction)
    for index in range(total):
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


def uniform_allocation(prompts: int, total_budget: int, upper: int) -> np.ndarray:
    """``total_budget`` spread as evenly as possible (the first prompts take the remainder)."""
    base, remainder = divmod(total_budget, prompts)
    allocation = np.full(prompts, base, dtype=np.int64)
    allocation[:remainder] += 1
    return np.minimum(allocation, upper)
