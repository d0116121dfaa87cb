from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from workers.algorithms.heddle.prediction import (
    ProgressivePredictor,
    PromptHistoryPredictor,
    TrajectoryContext,
    contexts_after_each_step,
    pearson_r,
    recall_at_top,
)
from workers.sim.llm.trajectories import generate_trajectories, read_jsonl, write_jsonl


def test_prompt_history_mean_and_fallback() -> None:
    history = PromptHistoryPredictor(default_total=7.0)
    assert history.predict(TrajectoryContext("p", 10)) == 7.0
    history.observe("p", 100)
    history.observe("p", 300)
    history.observe("q", 1000)
    assert history.predicted_total("p") == 200
    assert history.predict(TrajectoryContext("p", 10, steps_done=1, tokens_so_far=150)) == 50
    assert history.predict(TrajectoryContext("p", 10, tokens_so_far=900)) == 1.0
    assert history.predicted_total("unseen") == pytest.approx(1400 / 3)


def test_decomposition_into_step_contexts() -> None:
    records = generate_trajectories("coding", prompts=2, group_size=4, seed=1)
    samples = contexts_after_each_step(records)
    assert len(samples) == sum(len(r.steps) for r in records)
    first = records[0]
    context, remaining = samples[0]
    assert context.steps_done == 0 and remaining == first.total_tokens
    if len(first.steps) > 1:
        context, remaining = samples[1]
        assert context.first_step_tokens == first.steps[0].output_tokens
        assert remaining == first.total_tokens - first.steps[0].output_tokens


def test_progressive_predictor_trains_on_a_jsonl_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    write_jsonl(generate_trajectories("math", prompts=12, seed=2, epoch=0), path)
    records = read_jsonl(path)
    assert len(records) == 12 * 16
    history = PromptHistoryPredictor().fit(records)
    predictor = ProgressivePredictor(history, max_iter=40).fit(records)
    evaluation = generate_trajectories("math", prompts=12, seed=2, epoch=1)
    contexts = [c for c, _ in contexts_after_each_step(evaluation)]
    remaining = np.asarray([r for _, r in contexts_after_each_step(evaluation)], dtype=float)
    predicted = predictor.predict_many(contexts)
    assert predicted.shape == remaining.shape and np.all(predicted >= 1.0)
    assert pearson_r(np.log1p(predicted), np.log1p(remaining)) > 0.3
    assert predictor.predict(contexts[0]) == pytest.approx(predicted[0])


def test_unfitted_predictor_refuses() -> None:
    with pytest.raises(RuntimeError):
        ProgressivePredictor().predict(TrajectoryContext("p", 1))


def test_metrics() -> None:
    actual = np.arange(100, dtype=float)
    assert recall_at_top(actual, actual, 0.1) == 1.0
    assert recall_at_top(-actual, actual, 0.1) == 0.0
    assert pearson_r(actual, actual) == pytest.approx(1.0)
    assert pearson_r(np.ones(100), actual) == 0.0
