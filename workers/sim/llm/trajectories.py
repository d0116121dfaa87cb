"""Agentic trajectory generators for the Heddle scenarios, and the JSONL trace format.

A trajectory alternates LLM generation and tool calls (heddle §2.1, Fig. 1). Three profiles after
heddle §7 "Workloads" and Table 1; GRPO groups of ``group_size`` (16) samples per prompt.

Generative model (our assumption; the paper publishes distributions only as figures):

- Each prompt has a difficulty ``d ~ LogNormal(0, σ_d)`` and a prompt length; both are fixed per
  prompt across epochs, so a prompt-history predictor can learn ``d``.
- Each sample draws its own latent ``s ~ LogNormal(0, σ_s)`` — the intra-group divergence of
  Fig. 5 (one sample passes the example tests at once, another needs many repair steps).
- Steps: ``1 + Poisson((mean_steps − 1) · d · s)``, capped at ``max_steps``.
- Version 2 (the default): every step's length is ``base · √d · LogNormal(0, 0.5)``, ``base`` =
  ``plan_tokens`` for the first step (the plan) and ``step_tokens`` after — independent of
  ``s``. The sample's own latent shows only through how long it keeps going, so what a
  predictor learns from the first steps is the survival and the group's finished siblings, not
  a copy of the latent.
- Version 1 (kept for the earlier results): the plan is ``plan_tokens · √d · s ·
  LogNormal(0, 0.3)`` and later steps ``step_tokens · √(d·s) · LogNormal(0, 0.5)`` — the first
  step's length carries ``s`` with little noise, which hands a predictor the answer.
- Totals are cut at ``max_total_tokens`` (40 K in §7).
- Tool calls: ``LogNormal`` with the per-profile mean of Table 1 (coding 0.45 s, search 1.42 s,
  math 0.05 s) and σ = 0.8 (Fig. 2's skewed tool latency); tool outputs add ``tool_output_tokens``
  of context (search results are long, so search is prefill-heavy, §7.1).

JSONL trace: one trajectory per line, ``{"trajectory_id", "prompt_id", "group_id",
"prompt_tokens", "steps": [{"output_tokens", "tool_seconds", "tool_output_tokens"}, ...]}`` —
the same shape a recorded run would produce.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workers.algorithms.heddle.prediction import StepRecord, TrajectoryRecord

GROUP_SIZE = 16
GENERATOR_VERSION = 2


@dataclass(frozen=True)
class WorkloadProfile:
    name: str
    prompt_tokens: float
    mean_steps: float
    max_steps: int
    plan_tokens: float
    step_tokens: float
    tool_seconds: float
    tool_output_tokens: float
    difficulty_sigma: float = 0.5
    sample_sigma: float = 0.6
    tool_sigma: float = 0.8
    max_total_tokens: int = 40_000


PROFILES: dict[str, WorkloadProfile] = {
    # CodeForces coding agent: long plans and code, many repair steps for hard samples
    "coding": WorkloadProfile(
        name="coding",
        prompt_tokens=700,
        mean_steps=4.0,
        max_steps=30,
        plan_tokens=700,
        step_tokens=550,
        tool_seconds=0.45,
        tool_output_tokens=250,
        difficulty_sigma=0.35,
        sample_sigma=0.5,
    ),
    # HotpotQA search agent: short generations, frequent steps, long retrieved documents
    "search": WorkloadProfile(
        name="search",
        prompt_tokens=300,
        mean_steps=5.0,
        max_steps=24,
        plan_tokens=250,
        step_tokens=180,
        tool_seconds=1.42,
        tool_output_tokens=1200,
        difficulty_sigma=0.4,
        sample_sigma=0.55,
    ),
    # DAPO-Math agent: long reasoning, few quick calculator/solver calls
    "math": WorkloadProfile(
        name="math",
        prompt_tokens=250,
        mean_steps=2.5,
        max_steps=12,
        plan_tokens=1500,
        step_tokens=900,
        tool_seconds=0.05,
        tool_output_tokens=40,
        difficulty_sigma=0.35,
        sample_sigma=0.45,
    ),
}


def _prompt_attributes(profile: WorkloadProfile, prompt_index: int, seed: int) -> tuple[float, int]:
    rng = np.random.default_rng([seed, prompt_index, 7919])
    difficulty = float(rng.lognormal(0.0, profile.difficulty_sigma))
    prompt_tokens = max(32, int(rng.lognormal(np.log(profile.prompt_tokens), 0.4)))
    return difficulty, prompt_tokens


def generate_trajectories(
    profile: WorkloadProfile | str,
    *,
    prompts: int,
    group_size: int = GROUP_SIZE,
    seed: int = 0,
    epoch: int = 0,
    version: int = GENERATOR_VERSION,
) -> list[TrajectoryRecord]:
    """``prompts × group_size`` trajectories. Prompts (difficulty, length) depend only on
    ``seed``; samples also on ``epoch``, so epoch 0 can serve as history for epoch 1."""
    if version not in (1, 2):
        raise ValueError(f"unknown generator version {version}")
    spec = PROFILES[profile] if isinstance(profile, str) else profile
    records = []
    for p in range(prompts):
        difficulty, prompt_tokens = _prompt_attributes(spec, p, seed)
        rng = np.random.default_rng([seed, p, epoch, 104729])
        prompt_id = f"{spec.name}-p{p}"
        group_id = f"{prompt_id}-e{epoch}"
        for sample in range(group_size):
            latent = float(rng.lognormal(0.0, spec.sample_sigma))
            extra = rng.poisson(max(spec.mean_steps - 1.0, 0.0) * difficulty * latent)
            n_steps = int(min(1 + extra, spec.max_steps))
            steps = []
            total = 0
            for k in range(n_steps):
                base = spec.plan_tokens if k == 0 else spec.step_tokens
                if version == 2:
                    tokens = base * np.sqrt(difficulty) * rng.lognormal(0.0, 0.5)
                elif k == 0:
                    tokens = base * np.sqrt(difficulty) * latent * rng.lognormal(0.0, 0.3)
                else:
                    tokens = base * np.sqrt(difficulty * latent) * rng.lognormal(0.0, 0.5)
                out = int(max(8, min(tokens, spec.max_total_tokens - total)))
                total += out
                tool = float(
                    rng.lognormal(
                        np.log(spec.tool_seconds) - spec.tool_sigma**2 / 2, spec.tool_sigma
                    )
                )
                tool_out = int(rng.lognormal(np.log(spec.tool_output_tokens), 0.5))
                steps.append(StepRecord(out, tool, tool_out))
                if total >= spec.max_total_tokens:
                    break
            records.append(
                TrajectoryRecord(
                    trajectory_id=f"{group_id}-s{sample}",
                    prompt_id=prompt_id,
                    group_id=group_id,
                    prompt_tokens=prompt_tokens,
                    steps=tuple(steps),
                )
            )
    return records


def record_to_json(record: TrajectoryRecord) -> dict[str, object]:
    return {
        "trajectory_id": record.trajectory_id,
        "prompt_id": record.prompt_id,
        "group_id": record.group_id,
        "prompt_tokens": record.prompt_tokens,
        "steps": [
            {
                "output_tokens": s.output_tokens,
                "tool_seconds": s.tool_seconds,
                "tool_output_tokens": s.tool_output_tokens,
            }
            for s in record.steps
        ],
    }


def record_from_json(row: dict[str, object]) -> TrajectoryRecord:
    steps_raw = row["steps"]
    if not isinstance(steps_raw, list) or not steps_raw:
        raise ValueError(f"trajectory {row.get('trajectory_id')!r} needs a non-empty steps list")
    return TrajectoryRecord(
        trajectory_id=str(row["trajectory_id"]),
        prompt_id=str(row["prompt_id"]),
        group_id=str(row["group_id"]),
        prompt_tokens=int(row["prompt_tokens"]),  # type: ignore[call-overload]
        steps=tuple(
            StepRecord(
                output_tokens=int(s["output_tokens"]),
                tool_seconds=float(s.get("tool_seconds", 0.0)),
                tool_output_tokens=int(s.get("tool_output_tokens", 0)),
            )
            for s in steps_raw
        ),
    )


def write_jsonl(records: Iterable[TrajectoryRecord], path: Path) -> None:
    with path.open("w") as handle:
        for record in records:
            handle.write(json.dumps(record_to_json(record)) + "\n")


def read_jsonl(path: Path) -> list[TrajectoryRecord]:
    with path.open() as handle:
        return [record_from_json(json.loads(line)) for line in handle if line.strip()]


def total_tokens(records: Sequence[TrajectoryRecord]) -> int:
    return sum(r.total_tokens for r in records)
