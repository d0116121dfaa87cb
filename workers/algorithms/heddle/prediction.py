"""Progressive trajectory-length prediction (heddle §4.1, Fig. 9, Fig. 13).

``predict(context) -> remaining tokens`` behind one small protocol, refreshed after every step:

- :class:`PromptHistoryPredictor` — the prompt-only baseline (history-based, as in RhymeRL/Seer):
  the mean total length of earlier samples of the same prompt, global mean for unseen prompts.
- :class:`ProgressivePredictor` — gradient-boosted trees (scikit-learn
  ``HistGradientBoostingRegressor``, trains in seconds on CPU) over runtime features: prompt
  length, step index, tokens so far, tool time so far, the group's finished lengths so far, the
  first step's output length (the "execution plan" the paper calls a strong early indicator), the
  last step's length and the prompt-history mean. The paper fine-tunes Qwen-0.6B on the context
  text; with no text in the simulator, the same runtime signals enter as numeric features.

Training data: recorded trajectories (:class:`TrajectoryRecord`, the simulator's JSONL trace rows)
decomposed into (context after k steps, remaining length) tuples (§4.1 "Methodology").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np


@dataclass(frozen=True)
class StepRecord:
    output_tokens: int
    tool_seconds: float = 0.0
    tool_output_tokens: int = 0


@dataclass(frozen=True)
class TrajectoryRecord:
    """One finished trajectory (a JSONL trace row)."""

    trajectory_id: str
    prompt_id: str
    group_id: str
    prompt_tokens: int
    steps: tuple[StepRecord, ...]

    @property
    def total_tokens(self) -> int:
        return sum(step.output_tokens for step in self.steps)


@dataclass(frozen=True)
class TrajectoryContext:
    """What is known about a running trajectory after ``steps_done`` steps."""

    prompt_id: str
    prompt_tokens: int
    steps_done: int = 0
    tokens_so_far: int = 0
    tool_seconds_so_far: float = 0.0
    first_step_tokens: int | None = None
    last_step_tokens: int | None = None
    group_finished_lengths: tuple[int, ...] = field(default_factory=tuple)
    trajectory_id: str | None = None


class LengthPredictor(Protocol):
    def predict(self, context: TrajectoryContext) -> float:
        """Predicted remaining output tokens (≥ 0)."""
        ...

    def predict_many(self, contexts: Sequence[TrajectoryContext]) -> np.ndarray: ...


class PromptHistoryPredictor:
    """Prompt-level history baseline: mean total length of the prompt's earlier samples."""

    def __init__(self, default_total: float = 1000.0) -> None:
        self._sums: dict[str, float] = defaultdict(float)
        self._counts: dict[str, int] = defaultdict(int)
        self._global_sum = 0.0
        self._global_count = 0
        self._default = default_total

    def observe(self, prompt_id: str, total_tokens: float) -> None:
        self._sums[prompt_id] += total_tokens
        self._counts[prompt_id] += 1
        self._global_sum += total_tokens
        self._global_count += 1

    def fit(self, records: Iterable[TrajectoryRecord]) -> PromptHistoryPredictor:
        for record in records:
            self.observe(record.prompt_id, record.total_tokens)
        return self

    def prompt_mean(self, prompt_id: str) -> float | None:
        count = self._counts.get(prompt_id, 0)
        return self._sums[prompt_id] / count if count else None

    def predicted_total(self, prompt_id: str) -> float:
        mean = self.prompt_mean(prompt_id)
        if mean is not None:
            return mean
        return self._global_sum / self._global_count if self._global_count else self._default

    def predict(self, context: TrajectoryContext) -> float:
        return max(self.predicted_total(context.prompt_id) - context.tokens_so_far, 1.0)

    def predict_many(self, contexts: Sequence[TrajectoryContext]) -> np.ndarray:
        return np.asarray([self.predict(c) for c in contexts], dtype=float)


FEATURE_NAMES = (
    "prompt_tokens",
    "steps_done",
    "tokens_so_far",
    "tool_seconds_so_far",
    "first_step_tokens",
    "last_step_tokens",
    "group_finished_count",
    "group_finished_mean",
    "group_finished_max",
    "prompt_history_mean",
)


def contexts_after_each_step(
    records: Sequence[TrajectoryRecord],
) -> list[tuple[TrajectoryContext, int]]:
    """Decompose trajectories into (context after k steps, remaining tokens), k = 0..n−1.

    "The group's finished lengths so far" at step k are the group members that needed at most k
    steps — a step-count proxy for wall-clock order, which a trace of totals cannot give exactly.
    """
    groups: dict[str, list[TrajectoryRecord]] = defaultdict(list)
    for record in records:
        groups[record.group_id].append(record)
    samples = []
    for record in records:
        members = groups[record.group_id]
        tokens = 0
        tool = 0.0
        total = record.total_tokens
        for k in range(len(record.steps)):
            finished = tuple(
                m.total_tokens
                for m in members
                if m.trajectory_id != record.trajectory_id and len(m.steps) <= k
            )
            context = TrajectoryContext(
                prompt_id=record.prompt_id,
                prompt_tokens=record.prompt_tokens,
                steps_done=k,
                tokens_so_far=tokens,
                tool_seconds_so_far=tool,
                first_step_tokens=record.steps[0].output_tokens if k > 0 else None,
                last_step_tokens=record.steps[k - 1].output_tokens if k > 0 else None,
                group_finished_lengths=finished,
                trajectory_id=record.trajectory_id,
            )
            samples.append((context, total - tokens))
            tokens += record.steps[k].output_tokens
            tool += record.steps[k].tool_seconds
    return samples


_THREADPOOLS: Any = None


def _single_threaded() -> Any:
    """OpenMP spin-waits badly on a small shared CPU and per-call thread start-up dominates the
    tiny batches predicted here, so fit/predict run on one thread (controller built once).
    Imported lazily, like scikit-learn, so the prompt-history baseline needs neither."""
    global _THREADPOOLS
    if _THREADPOOLS is None:
        from threadpoolctl import ThreadpoolController

        _THREADPOOLS = ThreadpoolController()
    return _THREADPOOLS.limit(limits=1)


class ProgressivePredictor:
    """Gradient-boosted trees on runtime features, predicting log(1 + remaining tokens)."""

    def __init__(
        self,
        history: PromptHistoryPredictor | None = None,
        *,
        max_iter: int = 150,
        learning_rate: float = 0.08,
        max_leaf_nodes: int = 31,
        seed: int = 0,
    ) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        self.history = history or PromptHistoryPredictor()
        self._model = HistGradientBoostingRegressor(
            max_iter=max_iter,
            learning_rate=learning_rate,
            max_leaf_nodes=max_leaf_nodes,
            random_state=seed,
        )
        self._fitted = False

    def features(self, contexts: Sequence[TrajectoryContext]) -> np.ndarray:
        rows = np.full((len(contexts), len(FEATURE_NAMES)), np.nan)
        for i, c in enumerate(contexts):
            finished = c.group_finished_lengths
            mean = self.history.prompt_mean(c.prompt_id)
            rows[i] = (
                c.prompt_tokens,
                c.steps_done,
                c.tokens_so_far,
                c.tool_seconds_so_far,
                np.nan if c.first_step_tokens is None else c.first_step_tokens,
                np.nan if c.last_step_tokens is None else c.last_step_tokens,
                len(finished),
                np.mean(finished) if finished else np.nan,
                max(finished) if finished else np.nan,
                np.nan if mean is None else mean,
            )
        return rows

    def fit(self, records: Sequence[TrajectoryRecord]) -> ProgressivePredictor:
        """Train on recorded trajectories (the prompt history must already hold the earlier
        samples; pass ``history`` fitted on a previous epoch's trace)."""
        samples = contexts_after_each_step(records)
        if not samples:
            raise ValueError("no trajectories to train on")
        x = self.features([context for context, _ in samples])
        # A feature no training sample has (e.g. the group's finished lengths when every member
        # of every group needs the same number of steps) cannot be binned: a constant instead,
        # which no tree splits on.
        x[:, np.isnan(x).all(axis=0)] = 0.0
        y = np.log1p(np.asarray([remaining for _, remaining in samples], dtype=float))
        with _single_threaded():
            self._model.fit(x, y)
        self._fitted = True
        return self

    def predict_many(self, contexts: Sequence[TrajectoryContext]) -> np.ndarray:
        if not self._fitted:
            raise RuntimeError("ProgressivePredictor.fit must run before predict")
        if not contexts:
            return np.zeros(0)
        with _single_threaded():
            raw = self._model.predict(self.features(contexts))
        return np.maximum(np.expm1(raw), 1.0)

    def predict(self, context: TrajectoryContext) -> float:
        return float(self.predict_many([context])[0])


def recall_at_top(
    predicted: Sequence[float] | np.ndarray, actual: Sequence[float] | np.ndarray, fraction: float
) -> float:
    """Share of the truly longest ``fraction`` that are also in the predicted longest ``fraction``
    (Fig. 13's long-tail recall)."""
    pred = np.asarray(predicted, dtype=float)
    true = np.asarray(actual, dtype=float)
    k = max(1, round(fraction * len(true)))
    top_true = set(np.argsort(-true, kind="stable")[:k].tolist())
    top_pred = set(np.argsort(-pred, kind="stable")[:k].tolist())
    return len(top_true & top_pred) / k


def pearson_r(
    predicted: Sequence[float] | np.ndarray, actual: Sequence[float] | np.ndarray
) -> float:
    pred = np.asarray(predicted, dtype=float)
    true = np.asarray(actual, dtype=float)
    if pred.std() == 0 or true.std() == 0:
        return 0.0
    return float(np.corrcoef(pred, true)[0, 1])
