"""Supervised warm-up, GRPO policy-gradient updates and held-out evaluation for the tiny model."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch.nn import functional as F

from bench.darts_lab.model import TinyCausalLM
from bench.darts_lab.rollout import generate
from bench.darts_lab.task import (
    ANSWER,
    MAX_RESPONSE,
    PAD,
    PROMPT_LENGTH,
    Prompt,
    demonstration,
    score,
    skill_demonstration,
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
    skill_max_steps: int,
    style_steps: int,
    batch_size: int,
    learning_rate: float,
    rng: np.random.Generator,
    skill_accuracy: float = 0.98,
) -> tuple[list[float], int]:
    """Two-phase supervised warm-up: the skill first, then the verbose style.

    Phase 1 teaches the clean responses (XOR, concise or with running sums) until the batch's
    teacher-forced accuracy on answer digits, averaged over the last 20 batches, reaches
    ``skill_accuracy`` (small transformers learn this after
    a plateau of unpredictable length) or ``skill_max_steps``. Phase 2 fits the verbose
    demonstration mix (rambling, guessing) for ``style_steps``, so GRPO starts from a policy that
    can answer but has the long, noisy length distribution of darts §3.2.
    Returns the losses and the number of skill steps taken.
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    losses: list[float] = []
    skill_steps = 0
    recent: list[float] = []
    in_skill_phase = True
    step = 0
    while True:
        if in_skill_phase and skill_steps >= skill_max_steps:
            in_skill_phase = False
        if not in_skill_phase and step >= skill_steps + style_steps:
            break
        picks = rng.integers(0, len(train_prompts), batch_size)
        prompts = [train_prompts[i] for i in picks]
        if in_skill_phase:
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
        step += 1
        if in_skill_phase:
            skill_steps += 1
            # the answer digit (the token after ANSWER) is the skill; the rest is format
            answer_slots = (inputs == ANSWER).float() * mask
            hits = (logits.detach().argmax(dim=-1) == targets).float()
            recent.append(float((hits * answer_slots).sum() / answer_slots.sum()))
            if len(recent) >= 20 and float(np.mean(recent[-20:])) >= skill_accuracy:
                in_skill_phase = False
    return losses, skill_steps


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
    easy = [
        len(s.tokens) for p, out in zip(prompts, outputs, strict=True) if not p.hard for s in out
    ]
    hard = [len(s.tokens) for p, out in zip(prompts, outputs, strict=True) if p.hard for s in out]
    return {"easy": easy, "hard": hard}
