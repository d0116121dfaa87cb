"""The GRPO lab at a tiny size: finite losses, right shapes, DARTS decisions actually applied."""

from __future__ import annotations

import math

import numpy as np
import torch

from bench.darts_dynamics import end_of_training
from bench.darts_lab.experiment import ARMS, LabConfig, run_lab
from bench.darts_lab.model import ModelConfig, TinyCausalLM
from bench.darts_lab.rollout import generate
from bench.darts_lab.task import (
    ANSWER,
    DIGIT0,
    EOS,
    MAX_RESPONSE,
    PROMPT_LENGTH,
    VOCAB_SIZE,
    Prompt,
    score,
)
from bench.darts_lab.training import group_advantages, response_log_probs

TINY = LabConfig(
    width=32,
    layers=1,
    heads=2,
    train_prompts=16,
    heldout_prompts=8,
    warmup_skill_max_steps=3,
    warmup_style_steps=2,
    warmup_batch=8,
    rl_steps=3,
    prompts_per_step=4,
    group_size=4,
    distribution_samples=1,
)


def test_task_scoring():
    easy = Prompt(hard=False, digits=(1, 1, 0, 0, 0, 0, 0, 1))
    hard = Prompt(hard=True, digits=(1, 1, 0, 0, 0, 0, 0, 1))
    assert (easy.answer, hard.answer) == (0, 1)
    assert score(easy, [ANSWER, DIGIT0 + 0, EOS]) == 1.0
    assert score(easy, [ANSWER, DIGIT0 + 1, EOS]) == 0.0
    assert score(easy, [ANSWER, DIGIT0 + 0]) == 0.0  # truncated before EOS
    assert hard.running_sums() == [0, 0, 0, 0, 0, 0, 1]


def test_group_advantages():
    assert group_advantages([1, 1, 1]).tolist() == [0.0, 0.0, 0.0]
    advantages = group_advantages([1, 0, 0, 0])
    assert advantages[0] > 0 > advantages[1]
    assert math.isclose(advantages.sum(), 0.0, abs_tol=1e-9)


def test_generation_shapes_and_abort_hook():
    torch.manual_seed(0)
    model = TinyCausalLM(ModelConfig(VOCAB_SIZE, PROMPT_LENGTH + MAX_RESPONSE, 32, 1, 2))
    prompts = [Prompt(hard=False, digits=(0,) * 8), Prompt(hard=True, digits=(1,) * 8)]
    seen: list[tuple[int, int]] = []

    def on_finished(prompt_index, sample, length, truncated):
        seen.append((prompt_index, sample))
        count = 3 if prompt_index == 0 else 2
        return [(prompt_index, s) for s in range(count) if (prompt_index, s) not in seen]

    outputs = generate(
        model, prompts, [3, 2], torch.Generator().manual_seed(0), on_finished=on_finished
    )
    assert [len(o) for o in outputs] == [3, 2]
    for samples in outputs:
        for sample in samples:
            assert 1 <= len(sample.tokens) <= MAX_RESPONSE
            assert sample.finished != sample.aborted
    # each prompt's first finisher aborted the rest of its group
    assert [sum(not s.aborted for s in samples) >= 1 for samples in outputs] == [True, True]
    log_probs, mask = response_log_probs(model, [prompts[0]], [outputs[0][0].tokens])
    assert log_probs.shape == mask.shape == (1, PROMPT_LENGTH + MAX_RESPONSE - 1)
    assert int(mask.sum()) == len(outputs[0][0].tokens)
    assert torch.all(log_probs <= 0)


def test_tiny_lab_runs_both_arms():
    result = run_lab(TINY)
    assert set(result.arms) == set(ARMS)
    assert all(math.isfinite(loss) for loss in result.warmup_losses)
    for name, arm in result.arms.items():
        assert len(arm.steps) == TINY.rl_steps
        for step in arm.steps:
            assert math.isfinite(step.loss)
            assert step.samples_kept == TINY.prompts_per_step * TINY.group_size
            assert step.tokens_generated > 0
            assert 0.0 <= step.heldout_accuracy <= 1.0
            assert step.generated_p99_length <= MAX_RESPONSE
        if name == "standard":
            assert all(s.samples_generated == s.samples_kept for s in arm.steps)
            assert all(s.baseline_shift_easy == s.baseline_shift_hard == 0.0 for s in arm.steps)
        else:
            budgets = [s.total_budget for s in arm.steps]
            assert all(16 <= b <= 32 for b in budgets)
            assert arm.steps[0].total_budget == 16  # no history yet: standard-sized first step
        if name == "darts_no_pruning":
            assert all(s.samples_aborted == 0 for s in arm.steps)
    summary = end_of_training(result)
    assert all(np.isfinite(v) for arm in summary.values() for v in arm.values())
    assert result.to_json()["arms"]["darts"]["steps"][0]["step"] == 0
