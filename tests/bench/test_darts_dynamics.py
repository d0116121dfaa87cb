"""The GRPO lab at a tiny size: the task, finite losses, right shapes, DARTS and Tail Batching
decisions actually applied; and the benchmark's quick mode end to end."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from bench.darts_dynamics import confidence_interval, run, summarise, versus_standard
from bench.darts_lab.experiment import ARMS, LabConfig, run_lab
from bench.darts_lab.model import ModelConfig, TinyCausalLM
from bench.darts_lab.rollout import generate
from bench.darts_lab.task import (
    ANSWER,
    DIGIT0,
    EOS,
    MAX_RAMBLE,
    MAX_RESPONSE,
    MIX_V1,
    MIX_V2,
    PROMPT_LENGTH,
    RAMBLE,
    VOCAB_SIZE,
    Prompt,
    best_guess_accuracy,
    demonstration,
    make_prompts,
    ramble_length,
    score,
    skill_demonstration,
)
from bench.darts_lab.training import group_advantages, response_log_probs

TINY = LabConfig(
    seeds=(0, 1),
    width=32,
    layers=1,
    heads=2,
    train_prompts=24,
    heldout_prompts=8,
    warmup_skill_max_steps=3,
    warmup_style_steps=2,
    warmup_batch=8,
    rl_steps=3,
    prompts_per_step=4,
    group_size=4,
    eval_every=2,
    eval_prompts=4,
    final_eval_samples=1,
)

TABLE = (3, 0, 7, 1, 1, 9, 2, 4, 6, 5)  # f(0) = 3, f(3) = 1, f(1) = 0


def test_task_answer_is_the_chain_of_lookups():
    easy = Prompt(count=1, start=0, table=TABLE)
    hard = Prompt(count=4, start=0, table=TABLE)
    assert not easy.hard and hard.hard
    assert easy.answer == 3
    assert hard.chain() == [3, 1, 0, 3]
    assert len(easy.tokens) == len(hard.tokens) == PROMPT_LENGTH
    assert score(hard, [ANSWER, DIGIT0 + 3, EOS]) == 1.0
    assert score(hard, [ANSWER, DIGIT0 + 3]) == 0.0  # truncated before EOS
    assert score(hard, [RAMBLE, ANSWER, DIGIT0 + 4, EOS]) == 0.0
    assert skill_demonstration(easy) == [ANSWER, DIGIT0 + 3, EOS]
    assert skill_demonstration(hard)[:-3] == [DIGIT0 + x for x in [3, 1, 0, 3]]
    assert all(score(p, skill_demonstration(p)) == 1.0 for p in (easy, hard))


def test_prompts_are_distinct_and_guessing_is_rarely_right():
    rng = np.random.default_rng(0)
    prompts = make_prompts(400, rng)
    assert len({p.key for p in prompts}) == 400
    assert 0.3 < np.mean([not p.hard for p in prompts]) < 0.5
    assert best_guess_accuracy(prompts) < 0.35
    heldout = make_prompts(50, rng, exclude={p.key for p in prompts})
    assert not {p.key for p in heldout} & {p.key for p in prompts}


def test_demonstrations_have_a_long_tail():
    rng = np.random.default_rng(1)
    rambles = [ramble_length(rng) for _ in range(4000)]
    assert min(rambles) >= 2 and max(rambles) <= MAX_RAMBLE
    # P(r >= x) = 2/x: about a fifth of rambles reach 10 tokens
    assert 0.15 < np.mean(np.asarray(rambles) >= 10) < 0.25
    prompts = make_prompts(300, rng)
    lengths = [len(demonstration(p, rng)) for p in prompts]
    assert max(lengths) <= MAX_RESPONSE
    assert max(lengths) >= 8 * np.mean(lengths)


def _verbose_chain(prompt, response):
    """A ramble, then the prompt's whole correct chain and answer."""
    clean = skill_demonstration(prompt)
    return response[0] == RAMBLE and response[-len(clean) :] == clean and len(response) > len(clean)


def test_version_2_adds_correct_but_verbose_chains_on_hard_prompts():
    rng = np.random.default_rng(2)
    prompts = make_prompts(600, rng)
    hard = [p for p in prompts if p.hard]
    v2 = [(p, demonstration(p, rng, MIX_V2)) for p in hard]
    verbose = [r for p, r in v2 if _verbose_chain(p, r)]
    assert 0.2 < len(verbose) / len(v2) < 0.4
    assert all(score(p, r) == 1.0 for p, r in v2 if _verbose_chain(p, r))
    assert all(len(r) <= MAX_RESPONSE for _, r in v2)
    # version 1's hard rambles end in a guess, never in the chain
    assert not any(_verbose_chain(p, demonstration(p, rng, MIX_V1)) for p in hard)


def test_group_advantages():
    assert group_advantages([1, 1, 1]).tolist() == [0.0, 0.0, 0.0]
    advantages = group_advantages([1, 0, 0, 0])
    assert advantages[0] > 0 > advantages[1]
    assert math.isclose(advantages.sum(), 0.0, abs_tol=1e-9)


def test_generation_shapes_and_abort_hook():
    torch.manual_seed(0)
    model = TinyCausalLM(ModelConfig(VOCAB_SIZE, PROMPT_LENGTH + MAX_RESPONSE, 32, 1, 2))
    prompts = [Prompt(count=1, start=2, table=TABLE), Prompt(count=5, start=9, table=TABLE)]
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
    responses = [outputs[0][0].tokens, [DIGIT0 + 1, ANSWER, DIGIT0 + 1, EOS]]
    log_probs, mask = response_log_probs(model, prompts, responses)
    assert log_probs.shape == mask.shape == (2, PROMPT_LENGTH + max(map(len, responses)) - 1)
    assert mask.sum(dim=1).tolist() == [float(len(r)) for r in responses]
    assert torch.all(log_probs <= 0)


def test_confidence_interval():
    single = confidence_interval([0.5])
    assert single["low"] == single["high"] == 0.5
    interval = confidence_interval([1.0, 2.0, 3.0])
    assert interval["mean"] == 2.0
    # t(0.975, 2) = 4.303, sd = 1, n = 3
    assert interval["half_width"] == pytest.approx(4.303 / math.sqrt(3), rel=1e-3)


def test_tiny_lab_runs_every_arm_and_seed():
    result = run_lab(TINY, cache_dir=None)
    assert set(result.arms) == set(ARMS)
    assert all(math.isfinite(loss) for loss in result.warmup.losses)
    n, m = TINY.prompts_per_step, TINY.group_size
    for name, runs in result.arms.items():
        assert [r.seed for r in runs] == list(TINY.seeds)
        for run_result in runs:
            steps = run_result.steps
            assert len(steps) == TINY.rl_steps
            assert [e["step"] for e in run_result.evaluations] == [2.0, 3.0]
            assert 0.0 <= run_result.final["accuracy"] <= 1.0
            for step in steps:
                assert math.isfinite(step.loss)
                assert step.tokens_generated > 0
                assert step.generated_max_length <= MAX_RESPONSE
            if name == "standard":
                assert all(s.samples_generated == s.samples_kept == n * m for s in steps)
            elif name.startswith("darts"):
                assert all(s.samples_kept == n * m for s in steps)
                assert all(n * m <= s.total_budget <= 2 * n * m for s in steps)
                assert steps[0].total_budget == n * m  # no history yet: standard-sized
            else:
                # a short round over 2N prompts trains the N groups that completed first
                first = steps[0]
                assert first.round_kind == "short"
                assert first.samples_generated == 2 * n * m
                assert first.prompts_trained == n
                assert first.samples_aborted > 0
            assert {"verbose_share_hard", "verbose_accuracy_hard"} <= set(run_result.final)
        if name == "darts_budget_1.5NM":
            assert all(s.total_budget == 24 for s in runs[0].steps[1:])
    summary = summarise(result)
    assert summary["darts"]["across_seeds"]["tokens_per_step"]["n"] == 2.0
    comparison = versus_standard(result)
    assert set(comparison) == set(ARMS) - {"standard"}
    assert result.to_json()["arms"]["darts"][0]["steps"][0]["step"] == 0


def test_quick_mode_reports_every_target():
    report = run(quick=True)
    assert report.quick
    names = {t.name for t in report.targets}
    assert names == {
        "darts_token_reduction_per_step_vs_standard",
        "darts_heldout_accuracy_minus_standard_ci_low",
        "warmup_policy_max_over_mean_length",
    }
    assert all(math.isfinite(t.value) for t in report.targets)
    assert set(report.series["summary"]) == set(ARMS)
