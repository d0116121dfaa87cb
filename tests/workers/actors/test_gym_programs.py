"""The reference workloads' actor programs: batches fit their schema, episode returns are
marked where episodes end, and a restored checkpoint continues exactly where it stopped."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

from workers.actors.gym_programs import DQNProgram, PPOProgram
from workers.algorithms.artos.dqn import DQNLearner
from workers.algorithms.artos.ppo import PPOLearner
from workers.buffers.schema import Schema

pytest.importorskip("gymnasium")


@pytest.mark.parametrize("make", [PPOProgram, DQNProgram])
def test_batches_fit_the_schema_and_mark_episode_returns(make):
    program = make()
    program.prepare()
    params = (
        PPOLearner(program.config).params()
        if isinstance(program, PPOProgram)
        else DQNLearner(program.config).params(env_steps=0)
    )
    state = program.start("actor0", seed=1)
    state, batch = program.sample(state, params, 300)
    count, _ = Schema(program.schema_fields()).validate(batch)
    assert count == 300 and state["steps"] == 300
    ended = ~np.isnan(batch["episode_return"])
    assert np.array_equal(ended, batch["done"])
    assert ended.any() and np.all(batch["episode_return"][ended] >= 1)


def test_a_restored_checkpoint_continues_the_same_trajectory():
    program = PPOProgram()
    program.prepare()
    params = PPOLearner(program.config).params()
    state = program.start("actor0", seed=7)
    state, _ = program.sample(state, params, 50)
    restored = pickle.loads(pickle.dumps(state))
    _, straight = program.sample(state, params, 50)
    _, after_restore = program.sample(restored, params, 50)
    for key in straight:
        assert np.array_equal(straight[key], after_restore[key], equal_nan=True)


@pytest.mark.parametrize("make", [PPOProgram, DQNProgram])
def test_the_zygote_warm_up_changes_neither_sampling_nor_the_global_generators(make, monkeypatch):
    import torch

    def prepared(warm_up: bool) -> tuple[Any, torch.Tensor, float]:
        program = make()
        if not warm_up:
            monkeypatch.setattr(program, "_warm_up", lambda: None)
        torch.manual_seed(3)
        np.random.seed(3)
        program.prepare()
        return program, torch.rand(4), float(np.random.random())

    cold, cold_torch, cold_numpy = prepared(warm_up=False)
    warm, warm_torch, warm_numpy = prepared(warm_up=True)
    assert torch.equal(cold_torch, warm_torch) and cold_numpy == warm_numpy
    params = (
        PPOLearner(cold.config).params()
        if isinstance(cold, PPOProgram)
        else DQNLearner(cold.config).params(env_steps=0)
    )
    _, expected = cold.sample(cold.start("actor0", seed=5), params, 60)
    _, got = warm.sample(warm.start("actor0", seed=5), params, 60)
    for key in expected:
        assert np.array_equal(expected[key], got[key], equal_nan=True)
