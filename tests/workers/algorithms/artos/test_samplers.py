"""Samplers against brute force: PER frequencies and weights, n-step returns, FIFO order."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.artos import (
    FifoPerActor,
    PrioritisedSampler,
    SamplerError,
    SumTree,
    full_batch,
    n_step_returns,
    uniform,
)


def test_full_batch_returns_every_slot_once_in_order():
    assert full_batch([3, 1, 2]).tolist() == [3, 1, 2]


def test_uniform_covers_the_buffer_evenly():
    rng = np.random.default_rng(0)
    draws = uniform(10, 100_000, rng)
    counts = np.bincount(draws, minlength=10) / draws.size
    assert draws.min() == 0 and draws.max() == 9
    assert np.allclose(counts, 0.1, atol=0.01)
    with pytest.raises(SamplerError, match=r"^size"):
        uniform(0, 1, rng)


def test_sum_tree_prefix_search_matches_a_linear_scan():
    rng = np.random.default_rng(1)
    priorities = rng.random(13)
    tree = SumTree(13)
    for index, priority in enumerate(priorities):
        tree.set(index, float(priority))
    assert tree.total == pytest.approx(priorities.sum())
    cumulative = np.cumsum(priorities)
    for prefix in rng.random(200) * priorities.sum():
        assert tree.find(float(prefix)) == int(np.searchsorted(cumulative, prefix, side="right"))


def test_per_sampling_frequencies_match_p_alpha_over_sum():
    alpha = 0.7
    sampler = PrioritisedSampler(capacity=6, alpha=alpha, beta=0.5)
    for index in range(5):  # slot 5 stays empty
        sampler.add(index)
    errors = np.array([0.1, 0.5, 1.0, 2.0, 4.0])
    sampler.update(np.arange(5), errors)
    rng = np.random.default_rng(2)
    counts = np.zeros(6)
    for _ in range(4000):
        batch = sampler.sample(32, rng)
        np.add.at(counts, batch.indices, 1)
    expected = (errors + sampler.epsilon) ** alpha
    expected /= expected.sum()
    assert counts[5] == 0
    assert np.allclose(counts[:5] / counts.sum(), expected, atol=0.01)


def test_per_importance_weights_match_the_formula():
    sampler = PrioritisedSampler(capacity=4, alpha=1.0, beta=0.4)
    for index in range(4):
        sampler.add(index)
    sampler.update([0, 1, 2, 3], [1.0, 2.0, 3.0, 4.0])
    batch = sampler.sample(64, np.random.default_rng(3))
    p = (np.array([1.0, 2.0, 3.0, 4.0]) + sampler.epsilon) / (10.0 + 4 * sampler.epsilon)
    raw = (4 * p) ** -0.4
    assert np.allclose(batch.probabilities, p[batch.indices])
    assert np.allclose(batch.weights, raw[batch.indices] / raw[batch.indices].max())


def test_new_slots_get_the_largest_priority_seen():
    sampler = PrioritisedSampler(capacity=3, alpha=1.0)
    sampler.add(0)
    sampler.update([0], [5.0])
    sampler.add(1)
    assert sampler.tree.get(1) == pytest.approx(5.0 + sampler.epsilon)
    with pytest.raises(SamplerError, match=r"^indices"):
        sampler.update([2], [1.0])
    with pytest.raises(SamplerError, match=r"^td_errors"):
        sampler.update([0, 1], [1.0])


def _brute_n_step(rewards, dones, gamma, n, t):
    total, discount = 0.0, 1.0
    for k in range(n):
        if t + k >= len(rewards):
            return total, t + k, discount
        total += discount * rewards[t + k]
        discount *= gamma
        if dones[t + k]:
            return total, t + k + 1, 0.0
    return total, t + n, discount


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_n_step_returns_match_brute_force(n):
    rng = np.random.default_rng(n)
    rewards = rng.normal(size=17)
    dones = rng.random(17) < 0.2
    result = n_step_returns(rewards, dones, 0.9, n)
    for t in range(17):
        total, bootstrap, discount = _brute_n_step(rewards, dones, 0.9, n, t)
        assert result.returns[t] == pytest.approx(total)
        assert result.bootstrap_index[t] == bootstrap
        assert result.discount[t] == pytest.approx(discount)


def test_n_step_bad_input_names_the_field():
    with pytest.raises(SamplerError, match=r"^dones"):
        n_step_returns([1.0, 2.0], [False], 0.9, 2)
    with pytest.raises(SamplerError, match=r"^gamma"):
        n_step_returns([1.0], [False], 1.5, 2)


def test_fifo_per_actor_keeps_arrival_order_and_drops_a_killed_actor():
    fifo = FifoPerActor()
    fifo.push("a", 0, 4)
    fifo.push("b", 0, 4)
    fifo.push("a", 4, 8)
    assert fifo.discard_actor("b") == 4
    assert [fifo.pop(), fifo.pop()] == [("a", 0, 4), ("a", 4, 8)]
    with pytest.raises(SamplerError):
        fifo.pop()


def test_fifo_take_cuts_a_block_and_the_rest_stays_first_in_line():
    fifo = FifoPerActor()
    fifo.push("a", 0, 5)
    fifo.push("b", 0, 2)
    assert fifo.take(max_steps=3) == ("a", 0, 3)
    assert fifo.take(actor="b") == ("b", 0, 2)
    assert fifo.take() == ("a", 3, 5)
    assert fifo.waiting == 0
    with pytest.raises(SamplerError, match=r"^size: no block of actor 'a'"):
        fifo.take(actor="a")
    with pytest.raises(SamplerError, match=r"^batch_size"):
        fifo.take(max_steps=0)


def test_fifo_discards_a_killed_actor_from_a_step_on_and_bounds_what_waits():
    fifo = FifoPerActor(limit=6)
    fifo.push("a", 0, 4)
    fifo.push("a", 4, 8)  # 8 waiting > 6: the two oldest steps go
    assert fifo.waiting == 6
    assert fifo.discard_actor("a", since=6) == 2
    assert [fifo.take(), fifo.take()] == [("a", 2, 4), ("a", 4, 6)]
