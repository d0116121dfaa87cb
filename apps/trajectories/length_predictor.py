"""Train the router's length predictor from recorded trajectories (heddle §4.1).

The router reports each finished trajectory's steps (``step_records``: per LLM step, its output
tokens and the tool time after it; ``prompt_tokens``), persisted by ``router_state``. This
module — run by Celery beat as ``trajectories.train_length_predictor`` — fits the progressive
predictor (gradient-boosted trees on runtime features, the one implementation in
``workers.algorithms.heddle.prediction``) on the older trajectories and scores it against the
prompt-history prior on the newest ones, which neither saw: remaining-token error after every
step. Only a model that beats the prior is published, to the Redis keys the router's
``PredictorFeed`` polls, with a new version and its scores; every run's scores go to the log.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from apps.trajectories.models import Trajectory, TrajectoryStatus
from controlplane.redis_client import configured_redis, key_prefix
from workers.algorithms.heddle.prediction import (
    ProgressivePredictor,
    PromptHistoryPredictor,
    StepRecord,
    TrajectoryContext,
    TrajectoryRecord,
    contexts_after_each_step,
)
from workers.router.registry import RegistryNames

log = logging.getLogger("loom.length_predictor")

TRAINING_TRAJECTORIES = 5_000  # the newest recorded trajectories a training run reads
HOLDOUT_SHARE = 0.2  # the newest share of them, scored and never trained on
MIN_TRAJECTORIES = 50  # fewer recorded ones: no training


@dataclass(frozen=True)
class TrainingReport:
    trajectories: int
    held_out: int
    progressive_mae_tokens: float | None  # mean |predicted − actual remaining| after each step
    prompt_history_mae_tokens: float | None
    published: bool
    reason: str
    version: str | None = None


def recorded_trajectories(limit: int = TRAINING_TRAJECTORIES) -> list[TrajectoryRecord]:
    """The newest ``limit`` finished trajectories with their steps, oldest first."""
    rows = list(
        Trajectory.objects.filter(status=TrajectoryStatus.FINISHED, step_records__isnull=False)
        .order_by("-finished_at", "-id")
        .values_list("pk", "prompt_id", "group_id", "prompt_tokens", "step_records")[:limit]
    )
    records = []
    for pk, prompt_id, group_id, prompt_tokens, steps in reversed(rows):
        if not steps:
            continue
        records.append(
            TrajectoryRecord(
                trajectory_id=str(pk),
                prompt_id=prompt_id or str(pk),
                group_id=group_id,
                prompt_tokens=prompt_tokens,
                steps=tuple(StepRecord(int(tokens), float(tool)) for tokens, tool in steps),
            )
        )
    return records


def _mean_error(
    predictor: PromptHistoryPredictor | ProgressivePredictor,
    samples: list[tuple[TrajectoryContext, int]],
) -> float:
    predicted = predictor.predict_many([context for context, _ in samples])
    actual = np.asarray([remaining for _, remaining in samples], dtype=float)
    return float(np.mean(np.abs(predicted - actual)))


def train_length_predictor(limit: int = TRAINING_TRAJECTORIES) -> TrainingReport:
    """Fit, score against the prior on held-out trajectories, publish when better."""
    records = recorded_trajectories(limit)
    if len(records) < MIN_TRAJECTORIES:
        return TrainingReport(
            len(records), 0, None, None, False, f"fewer than {MIN_TRAJECTORIES} recorded"
        )
    held_out = max(1, round(HOLDOUT_SHARE * len(records)))
    train, holdout = records[:-held_out], records[-held_out:]
    prior = PromptHistoryPredictor().fit(train)
    try:
        model = ProgressivePredictor(prior).fit(train)
    except ValueError as exc:  # e.g. a feature no training trajectory has (all missing)
        return _logged(
            TrainingReport(len(records), held_out, None, None, False, ""),
            f"training failed: {exc}",
        )
    samples = contexts_after_each_step(holdout)
    model_error, prior_error = _mean_error(model, samples), _mean_error(prior, samples)
    report = TrainingReport(
        trajectories=len(records),
        held_out=held_out,
        progressive_mae_tokens=model_error,
        prompt_history_mae_tokens=prior_error,
        published=False,
        reason="",
    )
    if model_error >= prior_error:
        return _logged(report, "no better than the prompt-history prior on held-out trajectories")
    client = configured_redis()
    if client is None:
        return _logged(report, "no Redis configured (embedded mode): nothing to publish to")
    version = f"{time.time():.3f}-{len(records)}"
    names = RegistryNames(key_prefix())
    published = replace(report, published=True, version=version)
    meta = asdict(published) | {"trained_at": time.time()}
    pipeline = client.pipeline(transaction=True)
    pipeline.set(names.length_predictor, pickle.dumps(model))
    pipeline.set(names.length_predictor_meta, json.dumps(meta))
    pipeline.execute()
    return _logged(published, "better than the prompt-history prior on held-out trajectories")


def _logged(report: TrainingReport, reason: str) -> TrainingReport:
    report = replace(report, reason=reason)
    log.info("length predictor training: %s", json.dumps(asdict(report)))
    return report
