"""Supervised warm-up, GRPO policy-gradient updates and held-out evaluation for the tiny model."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from bench.darts_lab.model import TinyCausalLM
from bench.darts_lab.rollout import generate
from bench.darts_lab.task import (
    MIX_V2,
    PAD,
    PROMPT_LENGTH,
    RAMBLE,
    DemonstrationMix,
    Prompt,
    demonstration,
    score,
    skill_demonstration,
)


def _batch_tensors(
    prompts: Sequence[Prompt], responses: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs, targets and the response-token mask for next-token training.

    Padded to the longest sequence of this batch only (the long tail is rare), not to the
    context length.
    """
    width = PROMPT_LENGTH + max((len(r) for r in responses), default=0)
    sequences = torch.full((len(prompts), width), PAD, dtype=torch.long)
    mask = torch.zeros((len(prompts), width - 1))
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        tokens = prompt.tokens + list(response)
        sequences[row, : len(tokens)] = torch.tensor(tokens)
        # target index t predicts token t+1: response tokens sit at PROMPT_LENGTH … onwards
        mask[row, PROMPT_LENGTH - 1 : PROMPT_LENGTH - 1 + len(response)] = 1.0
    return sequences[:, :-1], sequences[:, 1:], mask


def response_log_probs(
    model: TinyCausalLM, prompts: Sequence[Prompt], responses: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log π(y_t) of each response (batch × positions) and the mask of real tokens."""
    inputs, targets, mask = _batch_tensors(prompts, responses)
    logits = model(inputs)
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, targets[..., None])[..., 0]
    return log_probs, mask


def supervised_warmup(
    model: TinyCausalLM,
    draw_prompts: Callable[[int], list[Prompt]],
    *,
    skill_max_steps: int,
    style_steps: int,
    batch_size: int,
    skill_learning_rate: float,
    style_learning_rate: float,
    rng: np.random.Generator,
    skill_accuracy: float = 0.98,
    mix: DemonstrationMix = MIX_V2,
) -> tuple[list[float], int]:
    """Two-phase supervised warm-up on fresh prompts: the skill first, then the verbose style.

    Phase 1 teaches the clean responses (a direct answer for one look-up, the chain of look-ups
    otherwise) until the teacher-forced accuracy over their tokens, averaged over the last 20
    batches, reaches ``skill_accuracy`` or ``skill_max_steps`` pass. Phase 2 fits the verbose
    demonstration ``mix`` (rambling, guessing) for ``style_steps`` at a lower rate, so GRPO starts
    from a policy that can answer but has the long, noisy length distribution of darts §3.2.
    ``draw_prompts(n)`` gives ``n`` new prompts per batch (never the RL or held-out sets, so the
    skill is learnt rather than memorised). Returns the losses and the number of skill steps.
    """
    losses: list[float] = []
    recent: list[float] = []
    optimizer = torch.optim.AdamW(model.parameters(), lr=skill_learning_rate, weight_decay=0.0)
    skill_steps = 0
    while skill_steps < skill_max_steps:
        prompts = draw_prompts(batch_size)
        loss, accuracy = _supervised_step(
            model, optimizer, prompts, [skill_demonstration(p) for p in prompts]
        )
        losses.append(loss)
        recent.append(accuracy)
        skill_steps += 1
        if len(recent) >= 20 and float(np.mean(recent[-20:])) >= skill_accuracy:
            break
    optimizer = torch.optim.AdamW(model.parameters(), lr=style_learning_rate, weight_decay=0.0)
    for _ in range(style_steps):
        prompts = draw_prompts(batch_size)
        loss, _ = _supervised_step(
            model, optimizer, prompts, [demonstration(p, rng, mix) for p in prompts]
        )
        losses.append(loss)
    return losses, skill_steps


def _supervised_step(
    model: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    prompts: Sequence[Prompt],
    responses: Sequence[Sequence[int]],
) -> tuple[float, float]:
    """One next-token step on the responses; returns the loss and the token accuracy."""
    inputs, targets, mask = _batch_tensors(prompts, responses)
    logits = model(inputs)
    per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    loss = (per_token * mask).sum() / mask.sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    hits = (logits.detach().argmax(dim=-1) == targets).float()
    return float(loss.detach()), float((hits * mask).sum() / mask.sum())


def group_advantages(rewards: Sequence[float]) -> np.ndarray:
    """GRPO Eq. 2: ``(r − μ(Y)) / σ(Y)`` within one training group (0 when σ = 0)."""
    values = np.asarray(rewards, dtype=float)
    spread = values.std()
    if spread < 1e-8:
        return np.zeros_like(values)
    return (values - values.mean()) / spread


def policy_gradient_step(
    model: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    prompts: Sequence[Prompt],
    responses: Sequence[Sequence[int]],
    advantages: Sequence[float],
    micro_batch: int = 32,
) -> float:
    """One on-policy GRPO update with a token-level mean loss (DAPO, as darts §5.1 uses).

    ``loss = −Σ_i Σ_t A_i · log π(y_i,t) / Σ_i |y_i|``. Zero-advantage samples add no gradient,
    so they are left out of the forward pass but still count in the token normaliser. The rest
    run in micro-batches of similar length (gradients accumulate), so one long-tail response
    does not pad every other row to its length.
    """
    total_tokens = sum(len(r) for r in responses)
    chosen = sorted(
        (i for i, a in enumerate(advantages) if a != 0.0), key=lambda i: len(responses[i])
    )
    if not chosen or total_tokens == 0:
        return 0.0
    optimizer.zero_grad()
    total = 0.0
    for begin in range(0, len(chosen), micro_batch):
        rows = chosen[begin : begin + micro_batch]
        log_probs, mask = response_log_probs(
            model, [prompts[i] for i in rows], [responses[i] for i in rows]
        )
        weights = torch.tensor([advantages[i] for i in rows], dtype=torch.float32)[:, None]
        loss = -(weights * log_probs * mask).sum() / total_tokens
        loss.backward()
        total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return total


@dataclass(frozen=True)
class Evaluation:
    """Held-out accuracy (overall, easy, hard) and the sampled response lengths by prompt kind."""

    accuracy: float
    accuracy_easy: float
    accuracy_hard: float
    lengths_easy: list[int]
    lengths_hard: list[int]
    verbose_share_easy: float = 0.0
    verbose_share_hard: float = 0.0
    verbose_accuracy_hard: float = float("nan")

    @property
    def mean_length(self) -> float:
        every = self.lengths_easy + self.lengths_hard
        return float(np.mean(every)) if every else 0.0

    @property
    def max_over_mean_length(self) -> float:
        """The tail's weight: the longest sampled response over the mean (darts §3.2.1)."""
        every = self.lengths_easy + self.lengths_hard
        return float(max(every) / np.mean(every)) if every else 0.0

    def metrics(self) -> dict[str, float]:
        return {
            "accuracy": self.accuracy,
            "accuracy_easy": self.accuracy_easy,
            "accuracy_hard": self.accuracy_hard,
            "mean_length": self.mean_length,
            "max_length": float(max(self.lengths_easy + self.lengths_hard, default=0)),
            "max_over_mean_length": self.max_over_mean_length,
            "verbose_share_easy": self.verbose_share_easy,
            "verbose_share_hard": self.verbose_share_hard,
            "verbose_accuracy_hard": self.verbose_accuracy_hard,
        }


def evaluate(
    model: TinyCausalLM,
    prompts: Sequence[Prompt],
    generator: torch.Generator,
    samples: int = 2,
) -> Evaluation:
    """Held-out accuracy and lengths of ``samples`` responses per prompt, sampled at temperature 1.

    Sampled the way rollouts are rather than greedily: with several response modes per prompt
    (concise, rambling, chain of look-ups) the greedy path tells little about the policy, and the
    expected reward is what GRPO optimises.
    """
    outputs = generate(model, prompts, [samples] * len(prompts), generator)
    scores = [[score(p, s.tokens) for s in out] for p, out in zip(prompts, outputs, strict=True)]
    rewards = np.array(scores).mean(axis=1)
    hard = np.array([p.hard for p in prompts])
    # Responses that ramble (darts §3.2.2's verbosity), per prompt kind, and how often the hard
    # ones are still right (Pattern I's "correct but verbose").
    rambles = [[RAMBLE in s.tokens for s in out] for out in outputs]
    verbose = {
        kind: [r for p, row in zip(prompts, rambles, strict=True) if p.hard == kind for r in row]
        for kind in (False, True)
    }
    verbose_right = [
        right
        for p, row, row_scores in zip(prompts, rambles, scores, strict=True)
        if p.hard
        for rambled, right in zip(row, row_scores, strict=True)
        if rambled
    ]
    return Evaluation(
        accuracy=float(rewards.mean()),
        accuracy_easy=float(rewards[~hard].mean()) if (~hard).any() else float("nan"),
        accuracy_hard=float(rewards[hard].mean()) if hard.any() else float("nan"),
        lengths_easy=[
            len(s.tokens)
            for p, out in zip(prompts, outputs, strict=True)
            if not p.hard
            for s in out
        ],
        lengths_hard=[
            len(s.tokens) for p, out in zip(prompts, outputs, strict=True) if p.hard for s in out
        ],
        verbose_share_easy=float(np.mean(verbose[False])) if verbose[False] else 0.0,
        verbose_share_hard=float(np.mean(verbose[True])) if verbose[True] else 0.0,
        verbose_accuracy_hard=float(np.mean(verbose_right)) if verbose_right else float("nan"),
    )
