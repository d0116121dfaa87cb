"""Presorted dynamic-programming placement (heddle §5.2, Lemma 5.1, formula 3).

Sort trajectories by predicted length, descending; place contiguous runs of that order on the
workers, and

    dp[i][k] = min_p max(dp[p][k−1], cost_k(p, i)),   paper: cost_k(p, i) = α_k(i−p)·L[p+1]·τ_k

Worker ``k`` may have its own α and τ (heterogeneous MP, §6): the caller lists workers in the
order the sorted groups should map to them — highest MP first, so the longest trajectories get
the fastest workers.

Group-time models (``WorkerCost.model``):

- ``"paper"`` — formula 2 as written: α(|G|)·max L·τ. Lemma 5.1 (contiguity is optimal) holds.
- ``"fluid"`` (default in the simulator) — the same quantity, the longest member's time, computed
  the way the paper's profiler-driven α is meant to (§5.2 "Interference Factor": a simulation of
  the group "capturing batch-dependent interference and queuing delays"): with continuous
  batching every member decodes one token per step, so member ``j`` (sorted) is alive for the
  lead's first ``L_j`` tokens and the lead's time is ``τ·Σ_j L_j·(α(j)−α(j−1))`` (running count
  capped at the batch limit ``B``), floored by the throughput bound ``τ·α(B)·ΣL / B`` when the
  group must queue. α(n)·L_lead charges the whole lifetime at the initial batch size, which over-
  states a long trajectory's interference once its short neighbours finish. Both monotonicities
  below still hold (α convex, as the three-piece PTL is), so the DP stays exact over contiguous
  partitions; contiguity itself is Lemma 5.1's premise, proven for the paper model.

- ``"fluid"`` with a context charge (``kv_seconds_per_token > 0``; Loom's own extension of the
  same §5.2 group simulation to the context-aware engine): a member's context grows while it
  decodes, ``c(t) = context_base + context_growth · t`` for its ``t``-th token (its prompt, its
  own tokens and the tool outputs they bring back), so over its ``L`` tokens it is read
  ``S(L) = context_base·L + context_growth·L²/2`` times a token of KV. Every decode step reads
  the running batch's KV, so the group adds ``kv_seconds_per_token · Σ S(L_j)`` to the lead's
  time — long co-runners cost quadratically more than short ones, which a size-only α (profiled
  at one mean context) cannot see — and a KV pool of ``kv_capacity_tokens`` serves at most that
  many context tokens per step, a floor of ``Σ S(L_j) / capacity`` steps of at least the batch-one
  base step (members that do not fit queue). The size-only α is then profiled without context.
  Both terms grow with every added member, so the DP below stays exact over contiguous
  partitions; the swap argument of Lemma 5.1 no longer holds for them (a longer co-runner is
  no longer free), so contiguity becomes a restriction of the search, as in the paper's
  heterogeneous case.

Speed. The DP is O(N²K) as written. ``dp[p][k−1]`` is non-decreasing in ``p`` and ``cost(p, i)``
non-increasing in ``p``, so the min-max sits where they cross; a binary search — vectorised over
all ``i`` with numpy — finds it: O(N·K·log N), exact. Under the paper model a layer of the same
worker as the previous one reuses that layer's crossings (:class:`_PaperLayers`): when none moves,
the layer costs four numpy calls, and once a large fleet's groups shrink to what the slack allows
almost every layer is such a layer. Short trajectories below a threshold are aggregated into
blocks (§5.2): blocks only restrict where groups may split (costs still use every trajectory's
length), which bounds the DP's item count at ``max_items``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

GroupModel = Literal["paper", "fluid"]


@dataclass(frozen=True)
class WorkerCost:
    """One worker's cost profile.

    ``alpha[n]``: interference factor with ``n`` running (``alpha[0] = 0``, ``alpha[1] = 1``),
    non-decreasing; ``tau``: base per-token time; ``batch_limit``: running-batch cap (fluid model
    only); ``group_limit``: most trajectories the worker may hold (its KV capacity), larger groups
    are infeasible; ``overhead_per_trajectory``: seconds of batch-stalling work each member adds
    (its prefills: prompt and tool outputs), ``n ·`` that is added to the group's time — the cost
    that makes a crowded worker slow even when its members are short. ``kv_seconds_per_token``,
    ``kv_capacity_tokens``, ``context_base``, ``context_growth``: the fluid model's context
    charge (module docstring); ``kv_seconds_per_token = 0`` leaves it out.
    """

    alpha: np.ndarray
    tau: float
    batch_limit: int | None = None
    group_limit: int | None = None
    model: GroupModel = "paper"
    overhead_per_trajectory: float = 0.0
    kv_seconds_per_token: float = 0.0
    kv_capacity_tokens: float = float("inf")
    context_base: float = 0.0
    context_growth: float = 1.0
    _pieces: tuple[tuple[int, int, float], ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.alpha[0] != 0:
            raise ValueError("alpha[0] must be 0 (an empty worker costs nothing)")
        if self.model == "fluid":
            object.__setattr__(self, "_pieces", _increment_runs(self.alpha, self.batch_limit))

    def limited_alpha(self) -> np.ndarray:
        """``alpha`` with every group size past ``group_limit`` infeasible (∞)."""
        alpha = self.alpha
        if self.group_limit is not None and self.group_limit + 1 < len(alpha):
            alpha = alpha.copy()
            alpha[self.group_limit + 1 :] = np.inf
        return alpha

    def cost_from(
        self, lengths: np.ndarray, prefix: np.ndarray, start: np.ndarray
    ) -> Callable[[np.ndarray], np.ndarray]:
        """``cost`` specialised for fixed group starts (the DP's inner loop calls it ~log N
        times per layer): the start-dependent parts are computed once."""
        alpha = self.limited_alpha()
        if self.model == "paper":
            lead_tau = np.append(lengths, 0.0)[start] * self.tau
            zero_lead = not lead_tau.all()
            overhead = self.overhead_per_trajectory

            def paper_cost(end: np.ndarray) -> np.ndarray:
                size = end - start
                if not zero_lead:
                    value = alpha[size] * lead_tau  # α[0] = 0: empty groups cost nothing
                else:  # a group past its limit stays infeasible when its lead is 0 (not ∞·0)
                    with np.errstate(invalid="ignore"):
                        value = alpha[size] * lead_tau
                    np.nan_to_num(value, copy=False, nan=np.inf)
                return value + overhead * size if overhead else value

            return paper_cost
        pieces = [
            (start + first, start + last, inc * self.tau) for first, last, inc in self._pieces
        ]
        limit = None if self.batch_limit is None else min(self.batch_limit, len(alpha) - 1)
        drain_rate = 0.0 if limit is None else self.alpha[limit] / limit * self.tau
        base = prefix[start]
        infeasible = alpha == np.inf
        reads = self.context_reads(lengths) if self.kv_seconds_per_token > 0 else None
        # the KV pool's floor: each step reads at most the pool, and costs at least a batch-one step
        pool_step = self.tau / self.kv_capacity_tokens

        def fluid_cost(end: np.ndarray) -> np.ndarray:
            value = np.zeros(len(end))
            for lo, hi, inc in pieces:
                value += inc * (prefix[np.minimum(hi, end)] - prefix[np.minimum(lo, end)])
            if limit is not None:
                value = np.maximum(value, drain_rate * (prefix[end] - base))
            if reads is not None:
                group_reads = reads[end] - reads[start]
                value = np.maximum(value, pool_step * group_reads)
                value = value + self.kv_seconds_per_token * group_reads
            if self.overhead_per_trajectory:
                value = value + self.overhead_per_trajectory * (end - start)
            if infeasible.any():
                value = np.where(infeasible[end - start], np.inf, value)
            return value

        return fluid_cost

    def context_reads(self, lengths: np.ndarray) -> np.ndarray:
        """Prefix sums of ``S(L) = context_base·L + context_growth·L²/2`` over ``lengths``: the
        KV tokens each member's decode steps read of its own context, summed over its steps."""
        reads = self.context_base * lengths + self.context_growth * lengths * lengths / 2.0
        return np.concatenate([[0.0], np.cumsum(reads)])

    def cost(
        self, lengths: np.ndarray, prefix: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> np.ndarray:
        """Time of the groups ``lengths[start:end]`` (sorted descending; vectorised)."""
        start, end = np.asarray(start), np.asarray(end)
        if len(self.alpha) <= int(np.max(end - start, initial=0)):
            raise ValueError(f"alpha covers {len(self.alpha) - 1} trajectories, need more")
        return self.cost_from(lengths, prefix, start)(end)


def _increment_runs(
    alpha: np.ndarray, batch_limit: int | None
) -> tuple[tuple[int, int, float], ...]:
    """Run-length encoding of α's increments by member offset: ``(first, last, increment)`` —
    offsets ``first ≤ o < last`` add ``increment·L`` (offset 0 is the lead, increment α(1)).
    Offsets at or past the batch limit add nothing (those members queue, they do not interfere).
    A three-piece α gives four runs."""
    increments = np.diff(alpha)
    if batch_limit is not None:
        increments = increments[:batch_limit]
    if len(increments) == 0:
        return ()
    if np.any(increments < -1e-12) or np.any(np.diff(increments[1:]) < -1e-9):
        raise ValueError("the fluid model needs a non-decreasing, convex alpha")
    values = increments.tolist()
    runs = []
    first = 0
    for offset in range(1, len(values) + 1):
        if offset == len(values) or not _close(values[offset], values[first]):
            runs.append((first, offset, values[first]))
            first = offset
    return tuple(runs)


def _close(value: float, reference: float) -> bool:
    """``np.isclose(value, reference, rtol=1e-9, atol=1e-12)`` on two floats, without numpy's
    per-call overhead (the encoding's loop): equal infinities are close, NaN never is."""
    if math.isfinite(value) and math.isfinite(reference):
        return abs(value - reference) <= 1e-12 + 1e-9 * abs(reference)
    return value == reference


@dataclass(frozen=True)
class Placement:
    """DP result. ``order`` lists trajectory indices, longest first; ``group_sizes[k]``
    consecutive entries of it go to worker ``k``; ``assignment[t]`` is trajectory ``t``'s worker."""

    order: np.ndarray
    group_sizes: tuple[int, ...]
    assignment: np.ndarray
    makespan: float
    items: int
    group_costs: tuple[float, ...] = ()

    def groups(self) -> list[list[int]]:
        bounds = np.concatenate([[0], np.cumsum(self.group_sizes)])
        return [
            [int(t) for t in self.order[bounds[k] : bounds[k + 1]]]
            for k in range(len(self.group_sizes))
        ]


def group_makespan(lengths: Sequence[float] | np.ndarray, worker: WorkerCost) -> float:
    """One group's time under ``worker``'s model (0 for an empty group), any member order."""
    ordered = np.sort(np.asarray(lengths, dtype=float))[::-1]
    prefix = np.concatenate([[0.0], np.cumsum(ordered)])
    return float(worker.cost(ordered, prefix, np.array([0]), np.array([len(ordered)]))[0])


def aggregate_sorted(
    lengths_desc: np.ndarray, *, threshold: float | None, max_items: int
) -> np.ndarray:
    """Item boundaries (trajectory positions, from 0 to N) after aggregating the short tail.

    Trajectories at or above ``threshold`` stay single items; the rest are cut into equal blocks
    so the item count stays within ``max_items``. With ``threshold=None`` it is the length at rank
    ``max_items // 2`` when there are more than ``max_items`` trajectories.
    """
    n = len(lengths_desc)
    if n <= max_items and threshold is None:
        return np.arange(n + 1)
    if threshold is None:
        singles = max_items // 2
    else:
        singles = int(np.searchsorted(-lengths_desc, -threshold, side="right"))
        singles = min(singles, max_items - 1)
    rest = n - singles
    if rest <= 0:
        return np.arange(n + 1)
    blocks = max(1, min(rest, max_items - singles))
    block_counts = np.full(blocks, rest // blocks, dtype=np.int64)
    block_counts[: rest % blocks] += 1
    counts = np.concatenate([np.ones(singles, dtype=np.int64), block_counts])
    return np.concatenate([[0], np.cumsum(counts)])


def _layer_binary_search(
    after: np.ndarray,
    bounds: np.ndarray,
    lengths: np.ndarray,
    prefix: np.ndarray,
    worker: WorkerCost,
) -> np.ndarray:
    """One worker's layer of the suffix form of formula 3, for every start item ``j`` at once:
    ``f[j] = min_{e ≥ j} max(cost(j, e), after[e])``. ``cost`` is non-decreasing in ``e`` and
    ``after`` non-increasing, so the optimum is at their crossing, found by a branch-free binary
    search (``e = n`` always qualifies: ``after[n] = 0``)."""
    n = len(bounds) - 1
    j = np.arange(n + 1)
    cost = worker.cost_from(lengths, prefix, bounds)
    lo = j.copy()
    hi = np.full(n + 1, n, dtype=np.int64)
    for _ in range(max(1, n.bit_length())):
        mid = (lo + hi) >> 1
        crossed = cost(bounds[mid]) >= after[mid]
        np.copyto(hi, mid, where=crossed)
        mid += 1
        np.copyto(lo, mid, where=~crossed)
    value = cost(bounds[lo])
    left = after[np.maximum(lo - 1, 0)]
    left[lo == j] = np.inf
    return np.minimum(value, left)


class _PaperLayers:
    """The paper model's layers of formula 3 for one worker over fixed items.

    ``cost(j, e) = α(bounds[e] − bounds[j])·τ·L[bounds[j]] (+ overhead·size)`` is non-decreasing in
    ``e`` and non-increasing in ``j``, so every layer ``after`` is non-increasing, and adding the
    same worker once more only lowers it: a start's crossing (the first ``e`` with
    ``cost(j, e) ≥ after[e]``) can only move earlier. Successive layers of one worker therefore
    keep the costs at the last crossing, and a layer whose crossings all stay put — the one
    before each still does not cross — is ``min(cost at the crossing, after just before it)``:
    four numpy calls instead of a binary search. Once the layers of a large fleet settle (every
    group down to the few items the slack allows) almost every layer takes that path; a layer
    where some crossing moves searches again, bounded by the old crossings. The partition is
    read back in plain floats (:meth:`largest_group`), the same operations as the layers.

    Layers carry a sentinel ``after[n + 1] = ∞`` (the "no group before" value)."""

    def __init__(self, worker: WorkerCost, bounds: np.ndarray, lengths: np.ndarray) -> None:
        self.alpha = worker.limited_alpha()
        self.bounds = bounds
        self.lead_tau = np.append(lengths, 0.0)[bounds] * worker.tau
        # a zero-length lead makes an over-limit group's ∞·0 a NaN: read as infeasible (∞)
        self._zero_lead = not self.lead_tau[:-1].all()
        self.overhead = worker.overhead_per_trajectory
        n = len(bounds) - 1
        self.starts = np.arange(n + 1)
        self.crossing: np.ndarray | None = None
        self.at_crossing = np.empty(n + 1)  # cost(j, crossing[j])
        self.before_crossing = np.empty(n + 1)  # cost(j, crossing[j] − 1); −∞ if empty
        self.left_index = np.empty(n + 1, dtype=np.int64)  # crossing − 1; n + 1 if none
        self._scalars: tuple[list[float], list[int], list[float]] | None = None

    def cost_at(self, ends: np.ndarray) -> np.ndarray:
        """``cost(j, ends[j])`` for every start ``j``."""
        size = self.bounds.take(ends) - self.bounds
        if self._zero_lead:
            with np.errstate(invalid="ignore"):
                value = self.alpha.take(size) * self.lead_tau
            np.nan_to_num(value, copy=False, nan=np.inf)
        else:
            value = self.alpha.take(size) * self.lead_tau
        if self.overhead:
            value += self.overhead * size
        return value

    def layer(self, after: np.ndarray, again: bool) -> np.ndarray:
        """``f[j] = min_{e ≥ j} max(cost(j, e), after[e])``; ``again``: the previous layer was
        this worker's (its crossings bound this one's)."""
        n = len(self.bounds) - 1
        out = np.empty(n + 2)
        out[n + 1] = np.inf
        if again and self.crossing is not None:
            left = after.take(self.left_index)
            if np.less(self.before_crossing, left).all():
                np.minimum(self.at_crossing, left, out=out[: n + 1])
                return out
            crossing = self._search(after, self.crossing)
        else:
            crossing = self._search(after, np.full(n + 1, n))
        self._set_crossing(crossing)
        np.minimum(self.at_crossing, after.take(self.left_index), out=out[: n + 1])
        return out

    def _search(self, after: np.ndarray, upper: np.ndarray) -> np.ndarray:
        """Each start's crossing, known to lie in ``[j, upper[j]]``: a branch-free binary search
        (the predicate is monotone in ``e``; ``e = n`` always crosses, ``after[n] = 0``)."""
        lo, hi = self.starts.copy(), upper.copy()
        for _ in range(max(1, int((hi - lo).max()).bit_length())):  # [lo, hi] halves each step
            mid = (lo + hi) >> 1
            crossed = self.cost_at(mid) >= after.take(mid)
            np.copyto(hi, mid, where=crossed)
            mid += 1
            np.copyto(lo, mid, where=~crossed)
        return lo

    def _set_crossing(self, crossing: np.ndarray) -> None:
        n = len(self.bounds) - 1
        empty = crossing == self.starts
        self.crossing = crossing
        self.at_crossing = self.cost_at(crossing)
        self.before_crossing = self.cost_at(np.maximum(crossing - 1, self.starts))
        self.before_crossing[empty] = -np.inf
        self.left_index = np.where(empty, n + 1, crossing - 1)

    def cost(self, start: int, end: int) -> float:
        """``cost(start, end)`` in plain floats, the same operations as :meth:`cost_at`."""
        if self._scalars is None:
            self._scalars = (self.alpha.tolist(), self.bounds.tolist(), self.lead_tau.tolist())
        alpha, bounds, lead_tau = self._scalars
        size = bounds[end] - bounds[start]
        value = alpha[size] * lead_tau[start]
        if value != value:  # ∞·0: an over-limit group led by a zero-length trajectory
            value = math.inf
        return value + self.overhead * size if self.overhead else value

    def largest_group(self, start: int, target: float) -> int:
        """The last end ``e ≥ start`` with ``cost(start, e) ≤ target`` (binary search over the
        monotone cost; ``cost(start, start) = 0``)."""
        lo, hi = start, len(self.bounds) - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self.cost(start, mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo


def _solve_items(
    bounds: np.ndarray, lengths: np.ndarray, workers: Sequence[WorkerCost]
) -> tuple[list[int], float, list[float]]:
    """Formula 3 over items (``bounds`` = item boundaries in the sorted order) → group bounds in
    items, makespan.

    The DP runs over suffixes (last worker first), which yields the optimal makespan of *every*
    remaining sub-problem; the partition is then read front to back, giving each worker the
    largest group that keeps the remaining optimum. Same optimal makespan as the paper's prefix
    form, but the min-max slack is not left as empty workers: every later group is the optimum
    of what is left (a lexicographic refinement), which spreads the short trajectories.
    """
    n = len(bounds) - 1
    prefix = np.concatenate([[0.0], np.cumsum(lengths)])
    after = np.full(n + 2, np.inf)
    after[n] = 0.0
    layers = [after]
    paper: dict[int, _PaperLayers] = {}
    previous: WorkerCost | None = None
    for worker in reversed(workers):
        if worker.model == "paper":
            if id(worker) not in paper:
                paper[id(worker)] = _PaperLayers(worker, bounds, lengths)
            after = paper[id(worker)].layer(after, again=worker is previous)
        else:
            after = np.append(_layer_binary_search(after, bounds, lengths, prefix, worker), np.inf)
        previous = worker
        layers.append(after)
    layers.reverse()  # layers[k][j]: best makespan of items j.. on workers k..
    cuts = [0]
    costs = []
    start = 0
    for k, worker in enumerate(workers):
        target = layers[k][start] * (1 + 1e-9)
        if worker.model == "paper":
            # the ends within target form a prefix of [start, n], and the ends whose remainder
            # fits a suffix (layers are non-increasing) that meets it (the layer's optimum is
            # in both): the largest group is the prefix's last end
            evaluator = paper[id(worker)]
            end = evaluator.largest_group(start, target)
            cuts.append(end)
            costs.append(evaluator.cost(start, end))
            start = end
            continue
        ends = np.arange(start, n + 1)
        cost = worker.cost_from(lengths, prefix, np.full_like(ends, bounds[start]))(bounds[ends])
        feasible = (cost <= target) & (layers[k + 1][start : n + 1] <= target)
        choices = np.nonzero(feasible)[0]
        choice = int(choices[-1]) if len(choices) else n - start
        cuts.append(start + choice)
        costs.append(float(cost[choice]))
        start += choice
    return cuts, float(layers[0][0]), costs


def place_trajectories(
    predicted_lengths: Sequence[float] | np.ndarray,
    workers: Sequence[WorkerCost],
    *,
    aggregation_threshold: float | None = None,
    max_items: int = 256,
) -> Placement:
    """Optimal contiguous placement of trajectories onto ``workers`` (formula 3)."""
    lengths = np.asarray(predicted_lengths, dtype=float)
    n, k_workers = len(lengths), len(workers)
    if k_workers == 0:
        raise ValueError("need at least one worker")
    if np.any(lengths < 0) or not np.all(np.isfinite(lengths)):
        raise ValueError("predicted lengths must be finite and >= 0")
    order = np.argsort(-lengths, kind="stable")
    if n == 0:
        return Placement(order, tuple([0] * k_workers), np.zeros(0, dtype=np.int64), 0.0, 0)
    sorted_lengths = lengths[order]
    bounds = aggregate_sorted(sorted_lengths, threshold=aggregation_threshold, max_items=max_items)
    cuts, optimum, group_costs = _solve_items(bounds, sorted_lengths, workers)
    if not np.isfinite(optimum):
        raise ValueError(f"the workers' group limits cannot hold {n} trajectories")
    traj_bounds = bounds[np.asarray(cuts)]
    group_sizes = tuple(int(s) for s in np.diff(traj_bounds))
    assignment = np.empty(n, dtype=np.int64)
    assignment[order] = np.repeat(np.arange(k_workers), group_sizes)
    return Placement(
        order, group_sizes, assignment, max(group_costs), len(bounds) - 1, tuple(group_costs)
    )


def homogeneous_workers(worker: WorkerCost, count: int) -> list[WorkerCost]:
    """``count`` identical workers (§5.2's homogeneous premise)."""
    return [worker] * count
