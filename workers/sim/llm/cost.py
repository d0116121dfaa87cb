"""What one simulated worker's steps cost: the two latency models the simulator can run.

- :class:`LegacyCost` — the earlier model, kept as the named configuration ``"legacy"``: per-token
  time depends only on the number of running requests (``PTL(b) / speedup(m)``), a prefill stalls
  the whole batch, the KV cache is unbounded (only the prefix cache is LRU-bounded).
- :class:`ContextCost` — ``"context"``: :class:`~workers.sim.llm.latency.ContextLatencyModel` for
  one MP degree: step time rises with the batch's context tokens, prefill runs in chunks mixed
  into decode steps, and the KV pool bounds admission, preemption and migration.

The worker sees a step's time as ``base(decode, prefill) + kv_seconds_per_token · K`` and asks for
the per-token cost of each prefill; ``chunk_tokens is None`` selects the stalling prefill.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workers.sim.llm.latency import ContextLatencyModel


@dataclass(frozen=True)
class LegacyCost:
    per_token_seconds: Callable[[int], float]
    prefill_seconds_per_token_flat: float = 1e-4
    kv_capacity_tokens: float = float("inf")
    chunk_tokens: int | None = None
    kv_seconds_per_token: float = 0.0

    def base_step_seconds(self, decode_tokens: int, prefill_tokens: float) -> float:
        return self.per_token_seconds(decode_tokens)

    def prefill_seconds_per_token(self, tokens: float, context_before: float) -> float:
        return self.prefill_seconds_per_token_flat


@dataclass(frozen=True)
class ContextCost:
    model: ContextLatencyModel
    mp: int

    @property
    def chunk_tokens(self) -> int | None:
        return self.model.chunk_tokens

    @property
    def kv_capacity_tokens(self) -> float:
        return self.model.kv_capacity_tokens(self.mp)

    @property
    def kv_seconds_per_token(self) -> float:
        return self.model.kv_seconds_per_token(self.mp)

    def base_step_seconds(self, decode_tokens: int, prefill_tokens: float) -> float:
        return self.model.base_step_seconds(self.mp, decode_tokens, prefill_tokens)

    def prefill_seconds_per_token(self, tokens: float, context_before: float) -> float:
        return self.model.prefill_seconds_per_token(self.mp, tokens, context_before)


EngineCost = LegacyCost | ContextCost
