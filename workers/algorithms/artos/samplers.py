"""ARTOS samplers (artos §2.2 Table 1, §4.2): which stored steps a learner consumes.

Full batch (PPO, TRPO: the entire buffer, once), uniform (SAC, DQN), prioritised (PER-DQN, Ape-X:
proportional prioritisation on a sum-tree, importance-sampling weights, priority updates), n-step
returns (contiguous reward sequences) and FIFO per actor (IMPALA: each actor's data in arrival
order). They pick slot indices; the buffer holds the data. Randomness comes in as a numpy
``Generator`` so runs repeat exactly.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class SamplerError(ValueError):
    """A sampler asked for something it cannot give; the message names the parameter."""


def full_batch(occupied: Sequence[int] | IntArray) -> IntArray:
    """Every occupied slot, once, in the order given (on-policy: the whole iteration's data)."""
    return np.asarray(occupied, dtype=np.int64).copy()


def uniform(size: int, batch_size: int, rng: np.random.Generator) -> IntArray:
    """``batch_size`` slots of ``range(size)`` drawn uniformly with replacement."""
    if size < 1:
        raise SamplerError("size: cannot sample from an empty buffer")
    if batch_size < 1:
        raise SamplerError(f"batch_size: expected a positive integer, got {batch_size}")
    return rng.integers(0, size, size=batch_size, dtype=np.int64)


class SumTree:
    """A binary tree whose leaves hold priorities and whose inner nodes hold their sums.

    Set and prefix-sum search are O(log capacity): the structure PER needs (Schaul et al. 2016,
    the prioritised pattern of artos Table 1).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise SamplerError(f"capacity: expected a positive integer, got {capacity}")
        self.capacity = capacity
        self._leaves = 1 << max(0, (capacity - 1).bit_length())
        self._tree = np.zeros(2 * self._leaves, dtype=np.float64)

    @property
    def total(self) -> float:
        return float(self._tree[1])

    def get(self, index: int | IntArray) -> FloatArray:
        return self._tree[np.asarray(index) + self._leaves]

    def set(self, index: int, priority: float) -> None:
        if not 0 <= index < self.capacity:
            raise SamplerError(f"index: {index} outside 0..{self.capacity - 1}")
        if not np.isfinite(priority) or priority < 0:
            raise SamplerError(f"priority: expected a finite non-negative number, got {priority}")
        node = index + self._leaves
        change = priority - self._tree[node]
        while node >= 1:
            self._tree[node] += change
            node //= 2

    def find(self, prefix: float) -> int:
        """The leaf where the running sum of priorities first exceeds ``prefix``."""
        node = 1
        while node < self._leaves:
            left = 2 * node
            if prefix < self._tree[left]:
                node = left
            else:
                prefix -= self._tree[left]
                node = left + 1
        return min(node - self._leaves, self.capacity - 1)


@dataclass(frozen=True)
class PrioritisedBatch:
    indices: IntArray
    weights: FloatArray  # importance-sampling weights, normalised by their maximum
    probabilities: FloatArray


class PrioritisedSampler:
    """Proportional PER: P(i) = p_i^α / Σ p^α, weights (N·P(i))^−β / max (artos Table 1).

    New slots get the largest priority seen so far, so every step is sampled at least once soon;
    ``update`` sets p_i = |δ_i| + ε after the learner computed the TD errors.
    """

    def __init__(
        self, capacity: int, alpha: float = 0.6, beta: float = 0.4, epsilon: float = 1e-6
    ) -> None:
        if alpha < 0:
            raise SamplerError(f"alpha: expected >= 0, got {alpha}")
        if beta < 0:
            raise SamplerError(f"beta: expected >= 0, got {beta}")
        if epsilon <= 0:
            raise SamplerError(f"epsilon: expected > 0, got {epsilon}")
        self.tree = SumTree(capacity)
        self.alpha, self.beta, self.epsilon = alpha, beta, epsilon
        self._max_priority = 1.0
        self._size = 0

    @property
    def size(self) -> int:
        return self._size

    def add(self, index: int) -> None:
        """Slot ``index`` was (over)written: give it the largest priority so far."""
        if self.tree.get(index) == 0:
            self._size += 1
        self.tree.set(index, self._max_priority**self.alpha)

    def remove(self, index: int) -> None:
        if self.tree.get(index) != 0:
            self._size -= 1
        self.tree.set(index, 0.0)

    def update(
        self, indices: Sequence[int] | IntArray, td_errors: Sequence[float] | FloatArray
    ) -> None:
        """Priority updates after a learner step: p_i = |δ_i| + ε."""
        errors = np.abs(np.asarray(td_errors, dtype=np.float64))
        index_array = np.asarray(indices, dtype=np.int64)
        if errors.shape != index_array.shape:
            raise SamplerError(
                f"td_errors: expected one per index ({index_array.shape}), got {errors.shape}"
            )
        if not np.all(np.isfinite(errors)):
            raise SamplerError("td_errors: every TD error must be finite")
        for index, error in zip(index_array.tolist(), errors.tolist(), strict=True):
            if self.tree.get(index) == 0:
                raise SamplerError(f"indices: slot {index} holds no data")
            priority = error + self.epsilon
            self._max_priority = max(self._max_priority, priority)
            self.tree.set(index, priority**self.alpha)

    def sample(self, batch_size: int, rng: np.random.Generator) -> PrioritisedBatch:
        """Stratified: one draw per equal slice of the total priority mass."""
        if self._size == 0:
            raise SamplerError("size: cannot sample from an empty buffer")
        if batch_size < 1:
            raise SamplerError(f"batch_size: expected a positive integer, got {batch_size}")
        total = self.tree.total
        segment = total / batch_size
        targets = (np.arange(batch_size) + rng.random(batch_size)) * segment
        indices = np.fromiter(
            (self.tree.find(min(t, np.nextafter(total, 0))) for t in targets),
            dtype=np.int64,
            count=batch_size,
        )
        probabilities = self.tree.get(indices) / total
        weights = (self._size * probabilities) ** (-self.beta)
        return PrioritisedBatch(indices, weights / weights.max(), probabilities)


@dataclass(frozen=True)
class NStepReturns:
    returns: FloatArray  # Σ_{k<m} γ^k r_{t+k}, m ≤ n steps, cut at the episode's end
    bootstrap_index: IntArray  # t + m: the state whose value bootstraps the return
    discount: FloatArray  # γ^m, or 0 where the episode ended within the n steps


def n_step_returns(
    rewards: Sequence[float] | FloatArray,
    dones: Sequence[bool] | npt.NDArray[np.bool_],
    gamma: float,
    n: int,
) -> NStepReturns:
    """n-step returns over one actor's contiguous steps (artos Table 1, the N-Step pattern).

    The target for step t is ``returns[t] + discount[t] · V(s[bootstrap_index[t]])``; a done at
    step t+k ends the sum there and zeroes the bootstrap. Near the end of the data fewer than n
    steps remain: the sum uses what there is and bootstraps from the last next state.
    """
    reward_array = np.asarray(rewards, dtype=np.float64)
    done_array = np.asarray(dones, dtype=bool)
    if reward_array.ndim != 1 or done_array.shape != reward_array.shape:
        raise SamplerError(
            f"dones: expected the shape of rewards {reward_array.shape}, got {done_array.shape}"
        )
    if n < 1:
        raise SamplerError(f"n: expected a positive integer, got {n}")
    if not 0 <= gamma <= 1:
        raise SamplerError(f"gamma: expected 0 <= gamma <= 1, got {gamma}")
    length = reward_array.shape[0]
    returns = np.zeros(length)
    discount = np.ones(length)
    bootstrap = np.arange(length, dtype=np.int64)
    alive = np.ones(length, dtype=bool)
    for k in range(n):
        index = np.arange(length) + k
        valid = alive & (index < length)
        safe = np.minimum(index, length - 1)
        returns[valid] += discount[valid] * reward_array[safe[valid]]
        discount[valid] *= gamma
        bootstrap[valid] = index[valid] + 1
        ended = valid & done_array[safe]
        discount[ended] = 0.0
        alive &= valid & ~done_array[safe]
    return NStepReturns(returns, bootstrap, discount)


class FifoPerActor:
    """IMPALA's pattern (artos Table 1): per-actor blocks of steps in arrival order.

    Each block is taken once, oldest first, so every actor's steps are consumed in the order it
    wrote them and never twice. ``limit`` bounds the steps waiting: past it the oldest steps go
    (a buffer holding ``limit`` steps has overwritten them anyway).
    """

    def __init__(self, limit: int | None = None) -> None:
        if limit is not None and limit < 1:
            raise SamplerError(f"limit: expected a positive integer, got {limit}")
        self.limit = limit
        self._blocks: deque[tuple[str, int, int]] = deque()
        self._waiting = 0

    def __len__(self) -> int:
        return len(self._blocks)

    @property
    def waiting(self) -> int:
        """Steps pushed and not yet taken."""
        return self._waiting

    def push(self, actor: str, start: int, stop: int) -> None:
        if stop <= start:
            raise SamplerError(f"stop: expected > start ({start}), got {stop}")
        self._blocks.append((actor, start, stop))
        self._waiting += stop - start
        while self.limit is not None and self._waiting > self.limit:  # the oldest steps go
            name, old_start, old_stop = self._blocks.popleft()
            cut = min(old_stop - old_start, self._waiting - self.limit)
            self._waiting -= cut
            if old_start + cut < old_stop:
                self._blocks.appendleft((name, old_start + cut, old_stop))

    def pop(self) -> tuple[str, int, int]:
        """The oldest block still waiting: (actor, start, stop)."""
        return self.take()

    def take(self, max_steps: int | None = None, actor: str | None = None) -> tuple[str, int, int]:
        """The oldest waiting block (of ``actor`` when given), cut to ``max_steps``: the rest of
        it stays first in line, so the actor's next take continues where this one stopped."""
        if max_steps is not None and max_steps < 1:
            raise SamplerError(f"batch_size: expected a positive integer, got {max_steps}")
        index = next(
            (i for i, block in enumerate(self._blocks) if actor is None or block[0] == actor),
            None,
        )
        if index is None:
            who = "" if actor is None else f" of actor {actor!r}"
            raise SamplerError(f"size: no block{who} is waiting")
        name, start, stop = self._blocks[index]
        if max_steps is not None and stop - start > max_steps:
            self._blocks[index] = (name, start + max_steps, stop)
            stop = start + max_steps
        else:
            del self._blocks[index]
        self._waiting -= stop - start
        return name, start, stop

    def discard_actor(self, actor: str, since: int = 0) -> int:
        """Drop an actor's waiting steps from its step ``since`` on (it was killed and its policy
        discards the interrupted run); returns the steps dropped."""
        kept: deque[tuple[str, int, int]] = deque()
        for name, start, stop in self._blocks:
            if name == actor and stop > since:
                if start < since:
                    kept.append((name, start, since))
            else:
                kept.append((name, start, stop))
        dropped = self._waiting - sum(stop - start for _, start, stop in kept)
        self._blocks, self._waiting = kept, self._waiting - dropped
        return dropped
