"""Per-prompt length-variance history (darts §4.2.2, App. C: "historical variance estimate σ̂²_i
for each prompt, updated via an Exponential Moving Average").

The allocator only needs the :class:`LengthVarianceStore` protocol; the in-memory store serves the
simulator, the benchmarks and tests, and the control plane will persist the same interface.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Protocol

import numpy as np

from workers.algorithms.darts.moments import censored_moments

PromptId = Hashable


class LengthVarianceStore(Protocol):
    """Smoothed per-prompt response-length variance across epochs."""

    def variances(self, prompt_ids: Sequence[PromptId]) -> np.ndarray:
        """σ̂² per prompt, ``nan`` for a prompt never observed."""
        ...

    def observe(
        self,
        prompt_id: PromptId,
        lengths: Sequence[float] | np.ndarray,
        censored: Sequence[bool] | np.ndarray | None = None,
    ) -> None:
        """Fold one epoch's observed lengths of a prompt (its whole candidate pool) into the EMA;
        ``censored`` marks lengths that are only lower bounds (aborted or length-capped)."""
        ...


class InMemoryLengthVarianceStore:
    """A dict of EMAs: ``σ̂² ← decay·σ̂² + (1−decay)·var(lengths)``; the first observation sets it."""

    def __init__(self, decay: float = 0.7) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError("decay must be in [0, 1)")
        self.decay = decay
        self._variance: dict[PromptId, float] = {}

    def variances(self, prompt_ids: Sequence[PromptId]) -> np.ndarray:
        return np.array([self._variance.get(p, np.nan) for p in prompt_ids], dtype=float)

    def observe(
        self,
        prompt_id: PromptId,
        lengths: Sequence[float] | np.ndarray,
        censored: Sequence[bool] | np.ndarray | None = None,
    ) -> None:
        """With ``censored``, the pool's variance is the Kaplan–Meier one (``moments``): early stop
        (darts §4.3.1) aborts exactly a pruned prompt's longest candidates, so their partial
        lengths taken as final would understate the spread that made Alg. 1 saturate it."""
        values = np.asarray(lengths, dtype=float)
        if values.size < 2:
            return  # one sample says nothing about spread
        if censored is None:
            variance = float(values.var())
        else:
            variance = censored_moments(values, censored)[1] ** 2
        previous = self._variance.get(prompt_id)
        if previous is None:
            self._variance[prompt_id] = variance
        else:
            self._variance[prompt_id] = self.decay * previous + (1.0 - self.decay) * variance

    def observe_many(
        self, observations: Iterable[tuple[PromptId, Sequence[float] | np.ndarray]]
    ) -> None:
        for prompt_id, lengths in observations:
            self.observe(prompt_id, lengths)

    def __len__(self) -> int:
        return len(self._variance)


def smoothed_stds(store: LengthVarianceStore, prompt_ids: Sequence[PromptId]) -> np.ndarray:
    """σ̃_L per prompt for the allocator; unseen prompts get the median of the seen ones.

    The paper does not say how a first-epoch prompt is weighted. The batch median treats it as
    typical: neither starved nor given the whole budget. With no history at all every prompt gets
    the same value, which makes the allocation uniform.
    """
    variances = store.variances(prompt_ids)
    seen = ~np.isnan(variances)
    fill = float(np.median(variances[seen])) if seen.any() else 0.0
    return np.sqrt(np.where(seen, variances, fill))
