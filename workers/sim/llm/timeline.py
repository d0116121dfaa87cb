"""Per-trajectory timelines and heddle formula 1's decomposition of a trajectory's time.

Formula 1 (heddle §1, §2.2) splits a trajectory's completion time into queueing delay, tool time
and generation, and generation into the base per-token time τ (alone on its worker, batch of one)
times the interference coefficient α. The simulator records every step (:class:`StepTrace`) and
splits each step's time on the worker into

- ``queueing``: pending in the worker's queue (before admission and after every preemption);
- ``alone``: what the step's decode and its prefill of the uncached context take alone on a
  worker of the same MP degree — τ·tokens plus the batch-one prefill (``*_alone_seconds``);
- ``interference``: the rest of the time it ran, the (α − 1)·τ·tokens part: co-running requests'
  KV reads, decode matmuls and prefill chunks.

With the tool time and the wait for a KV migration that outlasted the tool call, the parts add
up to the trajectory's finish time exactly (every step is submitted when its tool call returns).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from workers.algorithms.heddle.latency_model import MPLatencyModel
from workers.sim.llm.latency import ContextLatencyModel


@dataclass(frozen=True)
class StepTrace:
    """One generation step of a trajectory as the worker served it."""

    worker: int
    mp: int
    submitted_at: float
    finished_at: float
    queueing_seconds: float
    output_tokens: int
    context_tokens: int
    prefill_tokens: int
    cached_tokens: int
    preemptions: int
    alone_seconds: float
    tool_seconds: float
    migration_wait_seconds: float = 0.0

    @property
    def run_seconds(self) -> float:
        return self.finished_at - self.submitted_at - self.queueing_seconds

    @property
    def interference_seconds(self) -> float:
        return self.run_seconds - self.alone_seconds


def context_prefill_alone_seconds(
    model: ContextLatencyModel, tokens: float, before: float, mp: int
) -> float:
    """A ``tokens``-long prefill after ``before`` resident tokens, alone on an MP-``mp`` worker
    (chunked: ``tokens / chunk`` steps, each reading the context's KV)."""
    if tokens <= 0:
        return 0.0
    steps = tokens / model.chunk_tokens
    per_step = model.base_step_seconds(mp, 0, model.chunk_tokens)
    kv = model.kv_seconds_per_token(mp) * (before + tokens / 2.0)
    return steps * (per_step + kv) + tokens * model.prefill_seconds_per_token(mp, tokens, before)


def context_decode_alone_seconds(
    model: ContextLatencyModel, tokens: float, before: float, mp: int
) -> float:
    """``tokens`` decode steps of one request holding ``before`` tokens of context, alone."""
    growth = model.kv_seconds_per_token(mp)
    return tokens * (model.base_step_seconds(mp, 1, 0) + growth * before) + (
        growth * tokens * tokens / 2.0
    )


def step_alone_seconds(
    engine: ContextLatencyModel | MPLatencyModel,
    mp: int,
    *,
    output_tokens: float,
    context_tokens: float,
    prefill_tokens: float,
) -> float:
    """The step alone on an MP-``mp`` worker: prefill of its uncached context, then decode."""
    if isinstance(engine, ContextLatencyModel):
        before = max(context_tokens - prefill_tokens, 0.0)
        return context_prefill_alone_seconds(
            engine, prefill_tokens, before, mp
        ) + context_decode_alone_seconds(engine, output_tokens, context_tokens, mp)
    return engine.prefill_seconds(prefill_tokens, mp) + output_tokens * engine.tau(mp)


def decompose(steps: Sequence[StepTrace]) -> dict[str, Any]:
    """Formula 1's parts of one trajectory's time, summed over its steps (seconds), plus the
    prefill it recomputed and how often it moved or was preempted."""
    workers = [s.worker for s in steps]
    return {
        "queueing_s": sum(s.queueing_seconds for s in steps),
        "alone_s": sum(s.alone_seconds for s in steps),
        "interference_s": sum(s.interference_seconds for s in steps),
        "tool_s": sum(s.tool_seconds for s in steps),
        "migration_wait_s": sum(s.migration_wait_seconds for s in steps),
        "output_tokens": sum(s.output_tokens for s in steps),
        "prefill_tokens": sum(s.prefill_tokens for s in steps),
        "cached_tokens": sum(s.cached_tokens for s in steps),
        "preemptions": sum(s.preemptions for s in steps),
        "worker_changes": sum(a != b for a, b in pairwise(workers)),
        "mp_degrees": sorted({s.mp for s in steps}),
        "alpha": (
            sum(s.run_seconds for s in steps) / max(sum(s.alone_seconds for s in steps), 1e-12)
        ),
    }
