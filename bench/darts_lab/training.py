"""Supervised warm-up, GRPO policy-gradient updates and held-out evaluation for the tiny model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional as F

from bench.darts_lab.model import TinyCausalLM
from bench.darts_lab.rollout import generate
from bench.darts_lab.task import (
    DIGITS_PER_PROMPT,
    MAX_RESPONSE,
    PAD,
    PROMPT_LENGTH,
    Prompt,
    demonstration,
    skill_demonstration,
    score,
)


def _batch_tensors(
    prompts: Sequence[Prompt], responses: Sequence[Sequence[int]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inputs, targets and the response-token mask for next-token training."""
    width = PROMPT_LENGTH + MAX_RESPONSE
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
    train_prompts: Sequence[Prompt],
    *,
    steps: int,
    batch_size: int,
    learning_rate: float,
    rng: np.random.Generator,
    skill_fraction: float = 0.6,
) -> list[float]:
    """Two-phase supervised warm-up: the skill first, then the verbose style.

    The first ``skill_fraction`` of the steps teach the clean responses (mod-5 addition, concise
    or with running sums); the rest fit the verbose demonstration mix (rambling, guessing), so GRPO
    starts from a policy that can answer but has the long, noisy length distribution of §3.2.
    """
    skill_steps = int(round(steps * skill_fraction))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    losses: list[float] = []
    for step in range(steps):
        picks = rng.integers(0, len(train_prompts), batch_size)
        prompts = [train_prompts[i] for i in picks]
        if step < skill_steps:
            responses = [skill_demonstration(p) for p in prompts]
        else:
            responses = [demonstration(p, rng) for p in prompts]
        inputs, targets, mask = _batch_tensors(prompts, responses)
        logits = model(inputs)
        per_token = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
        loss = (per_token * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


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
) -> float:
    """One on-policy GRPO update with a token-level mean loss (DAPO, as darts §5.1 uses).

    ``loss = −Σ_i Σ_t A_i · log π(y_i,t) / Σ_i |y_i|``. Zero-advantage samples add no gradient,
    so they are left out of the forward pass but still count in the token normaliser.
    """
    total_tokens = sum(len(r) for r in responses)
    chosen = [i for i, a in enumerate(advantages) if a != 0.0]
    if not chosen or total_tokens == 0:
        return 0.0
    log_probs, mask = response_log_probs(
        model, [prompts[i] for i in chosen], [responses[i] for i in chosen]
    )
    weights = torch.tensor([advantages[i] for i in chosen], dtype=torch.float32)[:, None]
    loss = -(weights * log_probs * mask).sum() / total_tokens
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return float(loss.detach())


def evaluate(
    model: TinyCausalLM,
    prompts: Sequence[Prompt],
    generator: torch.Generator,
    samples: int = 2,
) -> dict[str, float]:
    """Held-out accuracy (overall, easy, hard) and mean length of ``samples`` sampled responses.

    Sampled at temperature 1, the way rollouts are, rather than greedily: with several response
    modes per prompt (concise, rambling, chain of thought) the greedy path tells little about the
    policy, and the expected reward is what GRPO optimises.
    """
    outputs = generate(model, prompts, [samples] * len(prompts), generator)
    rewards = np.array(
        [[score(p, s.tokens) for s in out] for p, out in zip(prompts, outputs, strict=True)]
    ).mean(axis=1)
    lengths = np.array([np.mean([len(s.tokens) for s in out]) for out in outputs])
    hard = np.array([p.hard for p in prompts])
    return {
        "accuracy": float(rewards.mean()),
        "accuracy_easy": float(rewards[~hard].mean()) if (~hard).any() else float("nan"),
        "accuracy_hard": float(rewards[hard].mean()) if hard.any() else float("nan"),
        "mean_length": float(lengths.mean()),
    }


def sampled_lengths(
    model: TinyCausalLM, prompts: Sequence[Prompt], samples: int, generator: torch.Generator
) -> dict[str, list[int]]:
    """The policy's response-length distribution (temperature 1) split by prompt kind."""
    outputs = generate(model, prompts, [samples] * len(prompts), generator)
    easy = [len(s.tokens) for p, out in zip(prompts, outputs, strict=True) if not p.hard for s in out]
    hard = [len(s.tokens) for p, out in zip(prompts, outputs, strict=True) if p.hard for s in out]
    return {"easy": easy, "hard": hard}


__all__ = [
    "DIGITS_PER_PROMPT",
    "evaluate",
    "group_advantages",
    "policy_gradient_step",
    "response_log_probs",
    "sampled_lengths",
    "supervised_warmup",
]
