"""DPArrange: optimal discrete allocation among scalable candidates (arl-tangram App. B).

Algorithm 3 is a knapsack-style DP over tasks ``i`` and DP states ``j``; the topology supplies
the *DP operator* (Start / Prev / IsValid). Two operators:

- :class:`BasicDPOperator` — interchangeable units (CPU cores of one node, API slots): the state is
  the number of units used, ``Prev(j, k) = j − k``. The inner loops over ``j`` and ``k`` are one
  numpy sliding-window minimum per task, so a layer costs O(U·K) in C, not in Python.
- :class:`GpuChunkDPOperator` — Algorithm 4: the state is the vector ``(a, b, c, d)`` of free
  buddy chunks of 1, 2, 4, 8 GPUs, mixed-radix encoded into one integer. The text of App. B asks
  for "chunk splitting while preserving power-of-two constraints"; the printed Prev does not
  split, so we implement the transition the allocator really performs (buddy best-fit: take the
  smallest free chunk that holds ``k`` GPUs and return its unused halves to the free counts).
  That keeps every DP decision realisable by :class:`..topology.gpu.GpuTopology`.

Both operators answer a whole *prefix family* in one pass: the DP layer after the first ``p``
tasks is the optimum for the candidate prefix ``C[:p]``, which is exactly what the greedy
eviction of Algorithm 1 evaluates (it drops candidates from the tail). We return the minimum over
all final states (Alg. 3 reads ``dp[m][n]``, which would force every unit to be used even when a
discrete unit set cannot sum to ``n``); the tests check equality with brute force.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

CHUNK_SIZES = (1, 2, 4, 8)
_LEVEL_OF = {1: 0, 2: 1, 4: 2, 8: 3}

FloatArray = NDArray[np.float64]


class PrefixArrangement(Protocol):
    """Optimal allocations for every prefix ``C[:p]`` of the scalable candidates."""

    def best_cost(self, prefix: int) -> float: ...

    def allocation(self, prefix: int) -> list[int]: ...


class DPOperator(Protocol):
    """The per-topology primitives Algorithm 3 needs, folded into one prefix-DP entry point."""

    @property
    def free_units(self) -> int:
        """Units the tasks may share now (the per-unit profile's free entries)."""
        ...

    @property
    def table_width(self) -> int:
        """The largest unit count worth a column in a task's cost row."""
        ...

    def arrange_prefixes(self, costs: Sequence[FloatArray]) -> PrefixArrangement: ...


def dp_arrange(operator: DPOperator, costs: Sequence[FloatArray]) -> tuple[float, list[int]]:
    """Algorithm 3 for all tasks: ``(sum of durations, units per task)``; inf if infeasible.

    ``costs[i][k]`` is task ``i``'s duration with ``k`` units (``inf`` where ``k`` is not allowed).
    """
    arrangement = operator.arrange_prefixes(costs)
    total = arrangement.best_cost(len(costs))
    if not np.isfinite(total):
        return float(total), []
    return total, arrangement.allocation(len(costs))


# --- basic operator -------------------------------------------------------------------------


@dataclass
class _BasicArrangement:
    best: list[float]
    best_state: list[int]
    choices: list[NDArray[np.int64]]

    def best_cost(self, prefix: int) -> float:
        return self.best[prefix]

    def allocation(self, prefix: int) -> list[int]:
        if not np.isfinite(self.best[prefix]):
            raise ValueError(f"prefix {prefix} cannot be arranged in the free units")
        units = [0] * prefix
        state = self.best_state[prefix]
        choices = self.choices
        for i in range(prefix - 1, -1, -1):
            k: int = choices[i].item(state)  # a Python int, without a numpy scalar between
            units[i] = k
            state -= k
        return units


class BasicDPOperator:
    """Interchangeable units: state = units used; ``Prev(j, k) = j − k`` (Alg. 3, Basic)."""

    def __init__(self, free_units: int) -> None:
        if free_units < 0:
            raise ValueError("free_units must be >= 0")
        self._free_units = free_units

    @property
    def free_units(self) -> int:
        return self._free_units

    @property
    def table_width(self) -> int:
        return self._free_units

    def arrange_prefixes(self, costs: Sequence[FloatArray]) -> _BasicArrangement:
        capacity = self._free_units
        dp = np.full(capacity + 1, np.inf)
        dp[0] = 0.0
        best = [0.0]
        best_state = [0]
        choices: list[NDArray[np.int64]] = []
        itemsize = dp.itemsize
        rows = np.arange(capacity + 1)
        for layer, cost in enumerate(costs):
            cost = cost[: capacity + 1]
            if layer == 0:
                # from the start state 0 alone: state j is reached by taking j units
                dp = np.full(capacity + 1, np.inf)
                dp[: cost.shape[0]] = cost
                choices.append(np.arange(capacity + 1))
                state = int(dp.argmin())
                best.append(float(dp[state]))
                best_state.append(state)
                continue
            finite = np.flatnonzero(cost < np.inf)
            if finite.size == 0:
                dp = np.full(capacity + 1, np.inf)
                choices.append(np.zeros(capacity + 1, dtype=np.int64))
                best.append(np.inf)
                best_state.append(0)
                continue
            lo, hi = int(finite[0]), int(finite[-1])
            width = hi - lo + 1
            padded = np.empty(hi + capacity + 1)
            padded[:hi] = np.inf
            padded[hi:] = dp
            # row j of `windows` is padded[j : j + width] = dp[j - hi .. j - lo] (a view, no copy)
            windows: FloatArray = np.ndarray(
                (capacity + 1, width), dtype=np.float64, buffer=padded, strides=(itemsize, itemsize)
            )
            totals = windows + cost[hi : lo - 1 if lo > 0 else None : -1]
            offset = totals.argmin(axis=1)
            # the minima read at their argmin: numpy's row-wise argmin is several times faster
            # than its row-wise min, and the values are the same
            dp = totals[rows, offset]
            choices.append(hi - offset)
            state = int(dp.argmin())
            best.append(float(dp[state]))
            best_state.append(state)
        return _BasicArrangement(best=best, best_state=best_state, choices=choices)


# --- GPU chunk operator ---------------------------------------------------------------------


def chunk_take(free: tuple[int, int, int, int], units: int) -> tuple[int, int, int, int] | None:
    """Buddy best-fit on free-chunk counts: take ``units`` GPUs, split, return the new counts."""
    level = _LEVEL_OF.get(units)
    if level is None:
        return None
    counts = list(free)
    source = next((lv for lv in range(level, 4) if counts[lv] > 0), None)
    if source is None:
        return None
    counts[source] -= 1
    for lv in range(level, source):
        counts[lv] += 1
    return (counts[0], counts[1], counts[2], counts[3])


@dataclass
class _ChunkArrangement:
    best: list[float]
    best_state: list[int]
    layers: list[dict[int, tuple[float, int, int]]]

    def best_cost(self, prefix: int) -> float:
        return self.best[prefix]

    def allocation(self, prefix: int) -> list[int]:
        if not np.isfinite(self.best[prefix]):
            raise ValueError(f"prefix {prefix} cannot be arranged in the free chunks")
        units = [0] * prefix
        state = self.best_state[prefix]
        for i in range(prefix, 0, -1):
            _, previous, k = self.layers[i][state]
            units[i - 1] = k
            state = previous
        return units


class GpuChunkDPOperator:
    """Algorithm 4: states ``(a, b, c, d)`` of free 1/2/4/8-GPU chunks, mixed-radix encoded."""

    def __init__(self, free_chunks: tuple[int, int, int, int], total_gpus: int) -> None:
        if any(c < 0 for c in free_chunks):
            raise ValueError(f"chunk counts must be >= 0, got {free_chunks}")
        self.free_chunks = free_chunks
        # N1..N8: the most chunks of each size the pool can ever show (radices of the encoding).
        self.bounds = (total_gpus, total_gpus // 2, total_gpus // 4, total_gpus // 8)

    @property
    def free_units(self) -> int:
        """The GPUs in the free chunks."""
        return sum(count * size for count, size in zip(self.free_chunks, CHUNK_SIZES, strict=True))

    @property
    def table_width(self) -> int:
        """Every GPU of the pool: which chunk sizes fit is the DP's own question."""
        return self.bounds[0]

    def encode(self, state: tuple[int, int, int, int]) -> int:
        n1, n2, n4, _ = self.bounds
        a, b, c, d = state
        return a + (n1 + 1) * (b + (n2 + 1) * (c + (n4 + 1) * d))

    def decode(self, code: int) -> tuple[int, int, int, int]:
        n1, n2, n4, _ = self.bounds
        a, code = code % (n1 + 1), code // (n1 + 1)
        b, code = code % (n2 + 1), code // (n2 + 1)
        c, d = code % (n4 + 1), code // (n4 + 1)
        return (a, b, c, d)

    def is_valid(self, state: tuple[int, int, int, int]) -> bool:
        return all(0 <= s <= n for s, n in zip(state, self.bounds, strict=True))

    def arrange_prefixes(self, costs: Sequence[FloatArray]) -> _ChunkArrangement:
        start = self.encode(self.free_chunks)
        layer: dict[int, tuple[float, int, int]] = {start: (0.0, -1, 0)}
        layers = [layer]
        best = [0.0]
        best_state = [start]
        for cost in costs:
            options = [
                (k, float(cost[k])) for k in CHUNK_SIZES if k < len(cost) and np.isfinite(cost[k])
            ]
            nxt: dict[int, tuple[float, int, int]] = {}
            for code, (total, _, _) in layer.items():
                if not np.isfinite(total):
                    continue
                state = self.decode(code)
                for k, duration in options:
                    after = chunk_take(state, k)
                    if after is None:
                        continue
                    new_code = self.encode(after)
                    candidate = total + duration
                    held = nxt.get(new_code)
                    if held is None or candidate < held[0]:
                        nxt[new_code] = (candidate, code, k)
            layer = nxt
            layers.append(layer)
            if layer:
                code = min(layer, key=lambda c: layer[c][0])
                best.append(layer[code][0])
                best_state.append(code)
            else:
                best.append(np.inf)
                best_state.append(start)
        return _ChunkArrangement(best=best, best_state=best_state, layers=layers)
