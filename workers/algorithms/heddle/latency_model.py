"""Per-token time as a function of running batch size *and* model-parallel degree (heddle §2.3,
§5.2 "Interference Factor", §6) — the planners' model of the engine.

The batch-size curve is the project's one PTL implementation, ``workers.algorithms.latency``'s
:class:`ThreePieceLinear`. Two ways to get the MP dimension:

- **profiled** (``profiled``, one curve per MP degree): what heddle's profiler measures — per-token
  time across batch sizes for each worker configuration (§5.2, §6). The simulator fills it from
  its engine model (``workers.sim.llm.profiler``).
- **Amdahl** (degrees without a profile): ``PTL(b, m) = PTL_1(b) / speedup(m)``,
  ``speedup(m) = m / (1 + κ·(m−1))``. The default ``κ = 0.2`` is the simulator's earlier
  hand-picked value, kept only as the ``"legacy"`` engine configuration (no published source;
  the context engine's profile gives κ ≈ 0.2 at batch one and far less at large batches, which is
  why the profiled curves replace it there). The KV budget grows with the GPUs, so a worker's
  running-batch cap is ``m ×`` the per-GPU cap.

- **α(b) = PTL(b, m) / PTL(1, m)** and **τ(m) = PTL(1, m)** (heddle formula 1: base per-token time
  is "the contention-free time ... at batch size one").
- **Prefill** (prompt, tool output, or recompute after a cache miss) at
  ``prefill_seconds_per_token / speedup(m)``; legacy 1e-4 s/token ≈ 10 k tokens/s for a 14B model
  on one H100 (our assumption).
- **KV reads** (``kv_profile``, context-aware profiles only): per MP degree, the step time each
  context token of the running batch adds and the KV pool's size, for the placement's context
  charge (``placement`` module docstring).
- **KV migration** (heddle §5.3, Table 1): ``migration_fixed_s + tokens·kv_bytes_per_token /
  migration_bytes_per_s``; 160 KiB/token is Qwen3-14B's KV (40 layers × 8 KV heads × 128 dims × K,V
  × bf16), 25 GB/s a conservative share of 400 Gb/s GPUDirect RDMA, 0.1 s fixed setup (our
  assumptions); a 10 k-token context then moves in ≈ 0.17 s, inside Table 1's 0.12–0.35 s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from workers.algorithms.latency import DEFAULT_PTL_TP1, ThreePieceLinear

MP_DEGREES: tuple[int, ...] = (1, 2, 4, 8)


@dataclass(frozen=True)
class MPLatencyModel:
    base: ThreePieceLinear = DEFAULT_PTL_TP1
    comm_overhead: float = 0.2
    prefill_seconds_per_token: float = 1e-4
    kv_bytes_per_token: float = 160 * 1024
    migration_bytes_per_s: float = 25e9
    migration_fixed_s: float = 0.1
    profiled: tuple[tuple[int, ThreePieceLinear], ...] = ()
    kv_profile: tuple[tuple[int, float, float], ...] = ()

    def kv_terms(self, mp: int) -> tuple[float, float] | None:
        """``(seconds per KV token read per step, KV pool tokens)`` of an MP-``mp`` worker when the
        profiler measured them (a context-aware profile, whose PTL curves then exclude the KV
        reads), else ``None``: the PTL curves already hold a mean context's reads."""
        for degree, seconds, capacity in self.kv_profile:
            if degree == mp:
                return seconds, capacity
        return None

    def speedup(self, mp: int) -> float:
        if mp < 1:
            raise ValueError(f"MP degree must be >= 1, got {mp}")
        return mp / (1.0 + self.comm_overhead * (mp - 1))

    def _ptl(self, batches: np.ndarray, mp: int) -> np.ndarray:
        """PTL over ``batches`` at degree ``mp``: its profiled curve, else the Amdahl one."""
        for degree, curve in self.profiled:
            if degree == mp:
                return curve.evaluate(batches)
        return self.base.evaluate(batches) / self.speedup(mp)

    def per_token_seconds(self, batch: float, mp: int = 1) -> float:
        """PTL(b, m): seconds per output token for each of ``batch`` running requests."""
        for degree, curve in self.profiled:
            if degree == mp:
                return curve(max(batch, 1.0))
        return self.base(max(batch, 1.0)) / self.speedup(mp)

    def per_token_curve(self, max_batch: int, mp: int = 1) -> np.ndarray:
        """``PTL(b, m)`` for ``b = 0..max_batch`` (index 0 repeats b=1), vectorised."""
        batches = np.maximum(np.arange(max_batch + 1, dtype=float), 1.0)
        return self._ptl(batches, mp)

    def tau(self, mp: int = 1) -> float:
        """Base per-token time τ: contention-free, batch size one (heddle formula 1)."""
        return self.per_token_seconds(1, mp)

    def alpha_curve(
        self,
        group_size: int,
        mp: int = 1,
        batch_limit: int | None = None,
        group_limit: int | None = None,
    ) -> np.ndarray:
        """Interference factor α(n) for groups of ``n = 0..group_size`` trajectories (α(0) = 0),
        normalised so α(1) = 1 — ``ThreePieceLinear.relative_to(1)`` extended with MP.

        With ``batch_limit`` (the worker's running-batch cap) a group larger than the cap is
        charged its queueing too: ``α(min(n, B)) · max(1, n / B)`` — the group then drains at the
        capped batch's per-token time, ``n / B`` rounds deep. This is our stand-in for the
        paper's profiler-driven simulation of α "capturing batch-dependent interference and
        queuing delays" (§5.2); it stays non-decreasing, which the DP relies on.

        ``group_limit`` makes groups above it infeasible (α = ∞): a worker can only keep so many
        trajectories' prefix caches resident (KV capacity); past that every step recomputes its
        context, a cost formula 2 does not see.
        """
        sizes = np.arange(group_size + 1, dtype=float)
        limit = float(batch_limit) if batch_limit is not None else np.inf
        running = np.maximum(np.minimum(sizes, limit), 1.0)
        curve = self._ptl(running, mp) / self.tau(mp)
        curve = curve * np.maximum(1.0, sizes / limit)
        curve[0] = 0.0
        if group_limit is not None:
            curve[group_limit + 1 :] = np.inf
        return curve

    @cached_property
    def alpha_mp1(self) -> ThreePieceLinear:
        return self.base.relative_to(1)

    def prefill_seconds(self, tokens: float, mp: int = 1) -> float:
        return max(tokens, 0.0) * self.prefill_seconds_per_token / self.speedup(mp)

    def migration_seconds(self, tokens: float) -> float:
        return self.migration_fixed_s + max(tokens, 0.0) * self.kv_bytes_per_token / (
            self.migration_bytes_per_s
        )
