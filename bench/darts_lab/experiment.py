"""Standard GRPO vs DARTS vs Tail Batching on the lab's policy, over several RL seeds.

One warmed-up policy (cached under ``var/darts_lab``) is trained by every arm and every seed from
the same weights. Per seed, every arm sees the same prompt order and the same sampling seed.

- ``standard``: ``M`` samples per prompt, all kept (GRPO as verl runs it).
- ``darts``: budget (App. B, k once from the PTL curve, λ calibrated once to 1.5·N·M, ``ρ_t`` and
  each prompt's variance censoring-aware, ``ρ_t`` weighing prompts equally), allocation
  (Alg. 1), dual-end selection and tail pruning with early stop (Alg. 2), all from
  ``workers.algorithms.darts``; finished samples stream into one ``GroupRollout`` per prompt and
  its aborts reach the generator at once.
- ``darts_budget_1.5NM``: the same with ``M_total`` fixed at the 1.5·N·M the paper reports as the
  usual solved budget (App. B) instead of following Eq. 9 each step.
- ``tail_batching``: RollPacker's Tail Batching (darts App. H) through
  ``workers.algorithms.darts.TailBatchingPlanner``: short rounds over ``N' = ratio·N`` prompts
  stop once ``N`` groups are complete, the rest is deferred and re-computed in long rounds of
  ``N``. Each round is one training step.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.darts_lab import task
from bench.darts_lab.model import ModelConfig, TinyCausalLM
from bench.darts_lab.rollout import GeneratedSample, generate
from bench.darts_lab.task import MAX_RESPONSE, PROMPT_LENGTH, VOCAB_SIZE, Prompt, make_prompts
from bench.darts_lab.training import (
    Evaluation,
    evaluate,
    group_advantages,
    policy_gradient_step,
    supervised_warmup,
)
from workers.algorithms.darts import (
    DartsConfig,
    GroupRollout,
    InMemoryLengthVarianceStore,
    LengthMomentsEMA,
    TailBatchingPlanner,
    TailBatchingRound,
    budget_cost_slope,
    calibrate_trade_off,
    plan_batch,
    smoothed_stds,
)

ARMS = ("standard", "darts", "darts_budget_1.5NM", "tail_batching")
CACHE_DIR = Path(__file__).resolve().parents[2] / "var" / "darts_lab"


@dataclass(frozen=True)
class LabConfig:
    seeds: tuple[int, ...] = (0, 1, 2)
    width: int = 256
    layers: int = 3
    heads: int = 4
    data_seed: int = 0
    train_prompts: int = 128  # 30 steps of 16 visit each about four times (variance history)
    heldout_prompts: int = 256
    warmup_skill_max_steps: int = 1500
    warmup_style_steps: int = 150
    warmup_batch: int = 32
    warmup_skill_learning_rate: float = 1e-3
    warmup_style_learning_rate: float = 3e-4
    rl_steps: int = 30
    prompts_per_step: int = 16
    group_size: int = 8
    rl_learning_rate: float = 3e-4
    budget_target_multiple: float = 1.5
    tail_batching_ratio: float = 2.0  # N' = 2N, the best over-provisioning in darts_rollout
    eval_every: int = 10
    eval_prompts: int = 128
    final_eval_samples: int = 4
    threads: int = 1
    task_version: int = 2  # the demonstration mix (task.MIXES); 1 is the mix without verbose chains

    @property
    def mix(self) -> task.DemonstrationMix:
        return task.MIXES[self.task_version]

    def warmup_key(self) -> str:
        """Identifies a warm-up: the model shape, its schedule and the task's definition."""
        fields = {
            k: v
            for k, v in asdict(self).items()
            if k.startswith("warmup_") or k in ("width", "layers", "heads", "data_seed")
        }
        fields["task"] = asdict(self.mix)
        fields["task_shape"] = [VOCAB_SIZE, PROMPT_LENGTH, MAX_RESPONSE, task.EASY_SHARE]
        text = json.dumps(fields, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class StepRecord:
    step: int
    round_kind: str  # "" for standard and DARTS, "short" or "long" for Tail Batching
    prompts_trained: int
    tokens_generated: int
    samples_generated: int
    samples_aborted: int
    samples_kept: int
    total_budget: int
    pruned_prompts: int
    generated_mean_length: float
    generated_max_length: int
    kept_mean_length: float
    verbose_share: float  # generated samples that ramble (darts §3.2.2's verbosity)
    train_reward: float
    loss: float
    rollout_seconds: float
    train_seconds: float


@dataclass
class ArmResult:
    name: str
    seed: int
    steps: list[StepRecord]
    evaluations: list[dict[str, float]]
    final: dict[str, float]
    final_lengths: dict[str, list[int]]
    wall_seconds: float
    cpu_seconds: float  # this process's CPU time: the machine is shared, wall time is noisy


class _DartsShaper:
    """Per-arm DARTS state: variance history, length moments and the calibrated λ."""

    def __init__(self, config: LabConfig, fixed_budget_multiple: float | None) -> None:
        self.config = config
        self.fixed_budget_multiple = fixed_budget_multiple
        self.store = InMemoryLengthVarianceStore()
        self.moments = LengthMomentsEMA()
        self.trade_off: float | None = None
        self.slope: float | None = None

    def plan(self, prompts: list[Prompt]) -> tuple[int, list[GroupRollout], int]:
        """Budget, one streaming tracker per prompt, and how many prompts are tail-pruned."""
        c = self.config
        n_m = len(prompts) * c.group_size
        stds = smoothed_stds(self.store, [p.key for p in prompts])
        if self.moments.mean is None or self.moments.std is None:
            darts = DartsConfig(group_size=c.group_size, trade_off=0.0)
            plan = plan_batch(stds, config=darts, rho=0.0, cost_slope=1.0, total_budget=n_m)
            return plan.total_budget, plan.group_rollouts(darts), int(plan.shortest_only.sum())
        if self.trade_off is None or self.slope is None:
            # k once, from the PTL curve and the cluster (App. B Eq. 6), at the first step with
            # history; λ calibrated then so that this step's budget is the ~1.5·N·M the paper
            # reports as the solved average (App. B). Both held; the budget follows ρ_t.
            self.slope = budget_cost_slope(
                mean_length=self.moments.mean,
                std_length=self.moments.std,
                prompts=len(prompts),
                group_size=c.group_size,
            )
            self.trade_off = calibrate_trade_off(
                rho=self.moments.rho,
                cost_slope=self.slope,
                target_budget=c.budget_target_multiple * n_m,
            )
        darts = DartsConfig(group_size=c.group_size, trade_off=self.trade_off)
        fixed = (
            None if self.fixed_budget_multiple is None else round(self.fixed_budget_multiple * n_m)
        )
        plan = plan_batch(
            stds, config=darts, rho=self.moments.rho, cost_slope=self.slope, total_budget=fixed
        )
        return plan.total_budget, plan.group_rollouts(darts), int(plan.shortest_only.sum())

    def observe(self, prompts: list[Prompt], outputs: list[list[GeneratedSample]]) -> None:
        every_length: list[int] = []
        censored: list[bool] = []
        weights: list[float] = []
        for prompt, samples in zip(prompts, outputs, strict=True):
            # Aborted samples enter with their partial length, a lower bound on the real one:
            # censored, for the prompt's variance as for ρ_t's moments.
            lengths = [len(s.tokens) for s in samples]
            flags = [s.aborted or s.truncated for s in samples]
            self.store.observe(prompt.key, lengths, flags)
            every_length.extend(lengths)
            censored.extend(flags)
            weights.extend([1.0 / len(samples)] * len(samples))
        # ρ_t's moments treat aborted and length-capped samples as censored (Kaplan–Meier) and
        # weigh every prompt equally whatever its M'_i (a dataset-level statistic, App. B).
        self.moments.update(every_length, censored, weights)


@dataclass
class _Rollout:
    """One step's candidates and what to train on."""

    prompts: list[Prompt]
    outputs: list[list[GeneratedSample]]
    kept: list[list[int]]  # per prompt, the kept sample numbers (empty: not trained this step)
    budget: int
    pruned_prompts: int = 0
    round_kind: str = ""


def _standard(
    model: TinyCausalLM, prompts: list[Prompt], m: int, generator: torch.Generator
) -> _Rollout:
    outputs = generate(model, prompts, [m] * len(prompts), generator)
    return _Rollout(prompts, outputs, [list(range(m)) for _ in prompts], m * len(prompts))


def _darts(
    model: TinyCausalLM, prompts: list[Prompt], shaper: _DartsShaper, generator: torch.Generator
) -> _Rollout:
    budget, groups, pruned = shaper.plan(prompts)

    def on_finished(
        prompt_index: int, sample: int, length: int, truncated: bool
    ) -> list[tuple[int, int]]:
        decision = groups[prompt_index].sample_finished(sample, length, truncated)
        return [(prompt_index, s) for s in decision.abort]

    outputs = generate(
        model, prompts, [g.allocated for g in groups], generator, on_finished=on_finished
    )
    shaper.observe(prompts, outputs)
    return _Rollout(prompts, outputs, [list(g.kept()) for g in groups], budget, pruned)


def _tail_batching_round(
    model: TinyCausalLM,
    plan: TailBatchingRound[Prompt],
    m: int,
    generator: torch.Generator,
) -> tuple[_Rollout, list[bool]]:
    """Run one round; a short round aborts every other sample once enough groups complete."""
    prompts = list(plan.prompts)
    finished = [0] * len(prompts)
    completed: list[bool] = [False] * len(prompts)
    needed = plan.stop_after_groups

    def on_finished(
        prompt_index: int, sample: int, length: int, truncated: bool
    ) -> list[tuple[int, int]]:
        finished[prompt_index] += 1
        if finished[prompt_index] == m:
            completed[prompt_index] = True
        if needed is None or sum(completed) < needed:
            return []
        return [(p, s) for p in range(len(prompts)) if not completed[p] for s in range(m)]

    outputs = generate(model, prompts, [m] * len(prompts), generator, on_finished=on_finished)
    kept = [list(range(m)) if done else [] for done in completed]
    kind = "long" if plan.recompute else "short"
    return _Rollout(prompts, outputs, kept, m * len(prompts), round_kind=kind), completed


def _train_on(
    model: TinyCausalLM,
    optimizer: torch.optim.Optimizer,
    rollout: _Rollout,
) -> tuple[float, float, list[int]]:
    """One GRPO update on the kept groups; returns the loss, mean reward and kept lengths."""
    prompts: list[Prompt] = []
    responses: list[list[int]] = []
    advantages: list[float] = []
    rewards: list[float] = []
    for prompt, samples, chosen in zip(rollout.prompts, rollout.outputs, rollout.kept, strict=True):
        if not chosen:
            continue
        group = [samples[s] for s in chosen]
        group_rewards = [task.score(prompt, s.tokens) for s in group]
        rewards.extend(group_rewards)
        advantages.extend(group_advantages(group_rewards).tolist())
        prompts.extend([prompt] * len(group))
        responses.extend(s.tokens for s in group)
    model.train()
    loss = policy_gradient_step(model, optimizer, prompts, responses, advantages)
    model.eval()
    return loss, float(np.mean(rewards)) if rewards else 0.0, [len(r) for r in responses]


def run_arm(
    arm: str,
    seed: int,
    initial_state: dict[str, Any],
    train: list[Prompt],
    heldout: list[Prompt],
    config: LabConfig,
) -> ArmResult:
    """Train one arm for ``config.rl_steps`` GRPO steps from ``initial_state``."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose from {ARMS}")
    torch.manual_seed(seed + 1)
    model = new_model(config)
    model.load_state_dict(copy.deepcopy(initial_state))
    model.eval()
    optimizer = torch.optim.Adam(model.parameters(), lr=config.rl_learning_rate)
    sampling = torch.Generator().manual_seed(seed + 2)
    order_rng = np.random.default_rng(seed + 4)
    shaper = (
        _DartsShaper(config, 1.5 if arm == "darts_budget_1.5NM" else None)
        if arm.startswith("darts")
        else None
    )
    planner: TailBatchingPlanner[Prompt] = TailBatchingPlanner(
        config.prompts_per_step, config.tail_batching_ratio
    )
    fresh: deque[Prompt] = deque()
    records: list[StepRecord] = []
    evaluations: list[dict[str, float]] = []
    m, n = config.group_size, config.prompts_per_step
    started, cpu_started = time.perf_counter(), time.process_time()
    for step in range(config.rl_steps):
        while len(fresh) < max(n, planner.wide):
            fresh.extend(train[i] for i in order_rng.permutation(len(train)))
        t0 = time.perf_counter()
        if arm == "tail_batching":
            plan = planner.next_round(fresh)
            assert plan is not None  # the stream of fresh prompts never runs out
            rollout, completed = _tail_batching_round(model, plan, m, sampling)
            planner.round_finished(plan, completed)
        else:
            batch = [fresh.popleft() for _ in range(n)]
            rollout = (
                _standard(model, batch, m, sampling)
                if shaper is None
                else _darts(model, batch, shaper, sampling)
            )
        t1 = time.perf_counter()
        loss, reward, kept_lengths = _train_on(model, optimizer, rollout)
        t2 = time.perf_counter()
        every = [s for samples in rollout.outputs for s in samples]
        generated = [len(s.tokens) for s in every]
        records.append(
            StepRecord(
                step=step,
                round_kind=rollout.round_kind,
                prompts_trained=sum(1 for k in rollout.kept if k),
                tokens_generated=int(sum(generated)),
                samples_generated=len(every),
                samples_aborted=sum(1 for s in every if s.aborted),
                samples_kept=len(kept_lengths),
                total_budget=rollout.budget,
                pruned_prompts=rollout.pruned_prompts,
                generated_mean_length=float(np.mean(generated)),
                generated_max_length=int(max(generated)),
                kept_mean_length=float(np.mean(kept_lengths)) if kept_lengths else 0.0,
                verbose_share=float(np.mean([task.RAMBLE in s.tokens for s in every])),
                train_reward=reward,
                loss=loss,
                rollout_seconds=t1 - t0,
                train_seconds=t2 - t1,
            )
        )
        if config.eval_every and (step + 1) % config.eval_every == 0 and step + 1 < config.rl_steps:
            probe = evaluate(
                model, heldout[: config.eval_prompts], torch.Generator().manual_seed(seed + 3), 1
            )
            evaluations.append({"step": float(step + 1), **probe.metrics()})
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    final = evaluate(
        model, heldout, torch.Generator().manual_seed(seed + 3), config.final_eval_samples
    )
    evaluations.append({"step": float(config.rl_steps), **final.metrics()})
    return ArmResult(
        name=arm,
        seed=seed,
        steps=records,
        evaluations=evaluations,
        final=final.metrics(),
        final_lengths={"easy": final.lengths_easy, "hard": final.lengths_hard},
        wall_seconds=wall,
        cpu_seconds=cpu,
    )


def new_model(config: LabConfig) -> TinyCausalLM:
    return TinyCausalLM(
        ModelConfig(
            vocab_size=VOCAB_SIZE,
            context=PROMPT_LENGTH + MAX_RESPONSE,
            width=config.width,
            layers=config.layers,
            heads=config.heads,
        )
    )


@dataclass
class Warmup:
    state: dict[str, Any]
    losses: list[float]
    skill_steps: int
    seconds: float
    cached: bool


def warm_up(config: LabConfig, avoid: set[str], cache_dir: Path | None = CACHE_DIR) -> Warmup:
    """The supervised warm-up, loaded from ``cache_dir`` when an identical one was saved there.

    Deterministic for a given config (one thread, seeded), so the cache only saves time.
    """
    path = None if cache_dir is None else cache_dir / f"warmup-{config.warmup_key()}.pt"
    if path is not None and path.exists():
        saved = torch.load(path, weights_only=False)
        return Warmup(saved["state"], saved["losses"], saved["skill_steps"], saved["seconds"], True)
    torch.manual_seed(config.data_seed)
    model = new_model(config)
    rng = np.random.default_rng(config.data_seed + 100)
    started = time.perf_counter()
    losses, skill_steps = supervised_warmup(
        model,
        lambda count: make_prompts(count, rng, exclude=avoid),
        skill_max_steps=config.warmup_skill_max_steps,
        style_steps=config.warmup_style_steps,
        batch_size=config.warmup_batch,
        skill_learning_rate=config.warmup_skill_learning_rate,
        style_learning_rate=config.warmup_style_learning_rate,
        rng=rng,
        mix=config.mix,
    )
    seconds = time.perf_counter() - started
    state = copy.deepcopy(model.state_dict())
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {"state": state, "losses": losses, "skill_steps": skill_steps, "seconds": seconds}
        torch.save(saved, path)
    return Warmup(state, losses, skill_steps, seconds, False)


@dataclass
class LabResult:
    config: LabConfig
    parameters: int
    warmup: Warmup
    initial: Evaluation
    best_guess_accuracy: float
    arms: dict[str, list[ArmResult]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "parameters": self.parameters,
            "warmup": {
                "final_loss": self.warmup.losses[-1] if self.warmup.losses else None,
                "skill_steps": self.warmup.skill_steps,
                "seconds": self.warmup.seconds,
                "loaded_from_cache": self.warmup.cached,
            },
            "initial_metrics": self.initial.metrics(),
            "initial_lengths": {
                "easy": self.initial.lengths_easy,
                "hard": self.initial.lengths_hard,
            },
            "best_guess_accuracy": self.best_guess_accuracy,
            "arms": {
                name: [
                    {
                        "seed": run.seed,
                        "wall_seconds": run.wall_seconds,
                        "cpu_seconds": run.cpu_seconds,
                        "final": run.final,
                        "final_lengths": run.final_lengths,
                        "evaluations": run.evaluations,
                        "steps": [asdict(r) for r in run.steps],
                    }
                    for run in runs
                ]
                for name, runs in self.arms.items()
            },
        }


def run_lab(
    config: LabConfig, arms: tuple[str, ...] = ARMS, cache_dir: Path | None = CACHE_DIR
) -> LabResult:
    """Warm up (or load) one policy, then train every arm for every seed from it."""
    torch.set_num_threads(config.threads)
    rng = np.random.default_rng(config.data_seed)
    heldout = make_prompts(config.heldout_prompts, rng)
    train = make_prompts(config.train_prompts, rng, exclude={p.key for p in heldout})
    warmup = warm_up(config, {p.key for p in train + heldout}, cache_dir)
    model = new_model(config)
    model.load_state_dict(warmup.state)
    model.eval()
    initial = evaluate(
        model,
        heldout,
        torch.Generator().manual_seed(config.data_seed + 5),
        config.final_eval_samples,
    )
    result = LabResult(
        config=config,
        parameters=model.parameter_count(),
        warmup=warmup,
        initial=initial,
        best_guess_accuracy=task.best_guess_accuracy(heldout),
    )
    for arm in arms:
        result.arms[arm] = [
            run_arm(arm, seed, warmup.state, train, heldout, config) for seed in config.seeds
        ]
    return result
