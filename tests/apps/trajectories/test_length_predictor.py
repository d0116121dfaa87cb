"""The router's length predictor, trained by the control plane on recorded trajectories and
followed by a router (heddle §4.1): published only when it beats the prompt-history prior on
held-out trajectories, adopted by the router's ``PredictorFeed`` by version."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import pytest
import redis as redis_lib
import redis.asyncio as aioredis
from django.utils import timezone

from apps.trajectories.length_predictor import MIN_TRAJECTORIES, train_length_predictor
from apps.trajectories.models import TrajectoryStatus
from tests.factories import JobFactory, TrajectoryFactory
from workers.algorithms.heddle.prediction import ProgressivePredictor, TrajectoryContext
from workers.router.predictor_feed import PredictorFeed
from workers.router.registry import RegistryNames
from workers.router.trajectories import TrajectoryTable

pytestmark = [pytest.mark.redis, pytest.mark.django_db]


def _record_trajectories(count: int, seed: int = 0) -> None:
    """Finished trajectories whose length the first step tells (its tokens set how many steps
    follow) and their prompt does not (every prompt draws short and long ones alike)."""
    rng = random.Random(seed)
    job = JobFactory.create()
    for i in range(count):
        first = rng.choice((20, 200))
        steps = [[first, 0.5]] + [[first + rng.randrange(10), 0.5] for _ in range(first // 20)]
        TrajectoryFactory.create(
            job=job,
            prompt_id=f"p{i % 5}",
            status=TrajectoryStatus.FINISHED,
            finished_at=timezone.now(),
            prompt_tokens=30,
            step_records=steps,
            steps=len(steps),
            tokens=sum(tokens for tokens, _ in steps),
        )


def test_too_few_recorded_trajectories_train_nothing(router_names: RegistryNames) -> None:
    _record_trajectories(MIN_TRAJECTORIES - 1)
    report = train_length_predictor()
    assert not report.published and "fewer than" in report.reason


def test_a_better_model_is_published_and_a_router_adopts_it(
    router_names: RegistryNames, redis_url: str
) -> None:
    _record_trajectories(120)
    report = train_length_predictor()
    assert report.published, report
    assert report.progressive_mae_tokens is not None and report.prompt_history_mae_tokens
    assert report.progressive_mae_tokens < report.prompt_history_mae_tokens
    assert report.held_out == 24
    stored = redis_lib.Redis.from_url(redis_url).get(router_names.length_predictor_meta)
    assert isinstance(stored, bytes)
    meta = json.loads(stored)
    assert meta["version"] == report.version and meta["trajectories"] == 120

    table = TrajectoryTable()
    adopted = asyncio.run(_follow(redis_url, router_names, table))
    assert adopted == [True, False]  # a version is adopted once
    assert isinstance(table.predictor, ProgressivePredictor)
    assert table.predictor.history is table.history  # the router's live prior keeps learning
    long_start = _context(first_step_tokens=200)
    short_start = _context(first_step_tokens=20)
    assert table.predictor.predict(long_start) > 3 * table.predictor.predict(short_start)


def test_a_model_no_better_than_the_prior_is_not_published(
    router_names: RegistryNames, redis_url: str
) -> None:
    job = JobFactory.create()
    for i in range(60):  # the prompt sets the length: the prior is already exact
        steps = [[50, 0.0]] * (1 + i % 3)
        TrajectoryFactory.create(
            job=job, prompt_id=f"p{i % 3}", group_id=f"g{i % 3}", finished_at=timezone.now(),
            status=TrajectoryStatus.FINISHED, step_records=steps, steps=len(steps),
            tokens=50 * len(steps),
        )  # fmt: skip
    report = train_length_predictor()
    assert not report.published and "no better" in report.reason
    assert redis_lib.Redis.from_url(redis_url).get(router_names.length_predictor_meta) is None


def _context(first_step_tokens: int) -> TrajectoryContext:
    return TrajectoryContext(
        prompt_id="p0",
        prompt_tokens=30,
        steps_done=1,
        tokens_so_far=first_step_tokens,
        tool_seconds_so_far=0.5,
        first_step_tokens=first_step_tokens,
        last_step_tokens=first_step_tokens,
        group_finished_lengths=(),
        trajectory_id="t",
    )


async def _follow(redis_url: str, names: RegistryNames, table: TrajectoryTable) -> list[Any]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        feed = PredictorFeed(client, names, table)
        return [await feed.refresh(), await feed.refresh()]
    finally:
        await client.aclose()
