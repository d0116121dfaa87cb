"""The shared PPO and DQN of the ARTOS reference workloads: GAE against a hand computation,
updates that change the weights, the epsilon schedule and the replay ratio."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.artos.dqn import DQNConfig, DQNLearner, epsilon, updates_due
from workers.algorithms.artos.ppo import PPOConfig, PPOLearner, gae


def test_gae_bootstraps_segments_and_stops_at_episode_ends():
    rewards = np.array([[1.0, 1.0, 1.0]], np.float32)
    values = np.array([[0.5, 0.5, 0.5]], np.float32)
    next_values = np.array([[0.5, 2.0, 3.0]], np.float32)
    terminated = np.array([[0.0, 1.0, 0.0]], np.float32)
    ends = terminated.copy()
    gamma, lam = 0.9, 0.8
    got = gae(rewards, values, next_values, terminated, ends, gamma, lam)
    last = 1.0 + gamma * 3.0 - 0.5  # the segment's last step bootstraps from V(s_{t+1})
    middle = 1.0 - 0.5  # terminated: no bootstrap, and the recursion stops here
    first = (1.0 + gamma * 0.5 - 0.5) + gamma * lam * middle
    assert got[0].tolist() == pytest.approx([first, middle, last])


def test_a_truncated_episode_bootstraps_but_does_not_carry_over():
    rewards = np.ones((1, 2), np.float32)
    values = np.zeros((1, 2), np.float32)
    next_values = np.array([[4.0, 0.0]], np.float32)
    terminated = np.zeros((1, 2), np.float32)
    ends = np.array([[1.0, 0.0]], np.float32)  # truncated at step 0
    got = gae(rewards, values, next_values, terminated, ends, 0.5, 1.0)
    assert got[0].tolist() == pytest.approx([1.0 + 0.5 * 4.0, 1.0])


def _batch(size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "obs": rng.normal(size=(size, 4)).astype(np.float32),
        "next_obs": rng.normal(size=(size, 4)).astype(np.float32),
        "action": rng.integers(0, 2, size),
        "reward": np.ones(size, np.float32),
        "terminated": rng.random(size) < 0.05,
        "done": rng.random(size) < 0.05,
        "logp": np.full(size, np.log(0.5), np.float32),
    }


def test_ppo_update_is_deterministic_for_a_seed_and_changes_the_policy():
    rng = np.random.default_rng(0)
    batch = _batch(64, rng)
    first, second = PPOLearner(PPOConfig(seed=3)), PPOLearner(PPOConfig(seed=3))
    before = first.params()
    first.update(batch, segments=2)
    second.update(batch, segments=2)
    after_first, after_second = first.params(), second.params()
    assert all(np.array_equal(after_first[k], after_second[k]) for k in after_first)
    assert any(not np.array_equal(before[k], after_first[k]) for k in before)


def test_dqn_epsilon_schedule_and_replay_ratio():
    config = DQNConfig(eps_start=1.0, eps_end=0.1, eps_decay_steps=100, learning_starts=10)
    assert epsilon(config, 0) == 1.0 and epsilon(config, 50) == pytest.approx(0.55)
    assert epsilon(config, 1000) == pytest.approx(0.1)
    assert updates_due(config, 9, 0) == 0
    assert updates_due(config, 10 + 40, 0) == int(40 * config.updates_per_step)
    assert updates_due(config, 10 + 40, 100) == 0


def test_dqn_update_lowers_the_loss_on_a_fixed_batch_and_publishes_epsilon():
    config = DQNConfig(target_every=1_000)
    learner = DQNLearner(config)
    batch = _batch(64, np.random.default_rng(1))
    losses = [learner.update(batch) for _ in range(50)]
    assert losses[-1] < losses[0]
    assert float(learner.params(env_steps=0)["epsilon"]) == config.eps_start
