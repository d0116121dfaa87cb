"""Objective approximation for the greedy eviction (arl-tangram §4.2, App. A, Algorithm 2).

``objective = exactObj + approxObj``: the candidates' execution times come exactly from
DPArrange; the rest of the queue (same key resource) is estimated by inserting each action, at
its minimum units, into the completion heap in FCFS order. The first remaining action explores
several allocations and the best total wins.

Two refinements of the printed algorithm, both Loom's own:

- **A per-unit completion profile.** Algorithm 2's heap holds one completion time per action,
  so an estimated action "starts when the earliest running action completes" whatever units it
  needs and whatever units that completion frees. Here the heap holds one release time per
  *unit* of the key resource (free units release at 0, a running or just-selected action's units
  at its end). An action needing ``k`` units starts when ``k`` units have been released (the
  ``k``-th smallest release time) and holds them until it ends. With every action at one unit
  this is Algorithm 2; with more, the estimate sees that "wait for 16 cores, then run at 16" can
  beat "run at 2 now", and that a wide allocation delays the actions queued behind it.
- **Remaining actions at the allocation they would get.** The paper places every remaining
  action at its minimum units (one core). Deferring the head is then charged the delay it
  causes, but never credited that the deferred actions would run wide later too, so under
  contention a freed core always looks best spent at once, at DoP 1-2. The scheduler's
  ``rest_model="efficient"`` (the default) places each remaining action of a priced split at
  the allocation DPArrange's holding price would give it (``sizing.efficient_demand``), as a
  multi-unit placement; ``"minimum"`` keeps the paper's. The caller builds the demands.
- **Geometric exploration.** The paper explores the first remaining action at DoP
  ``1..depth``; we explore those and the doubling ladder up to its largest option
  (``sizing.UnitSizing.exploration_units``), so a deferral is weighed against a wide start.
  Not on GPU pools, whose buddy chunks break the profile's "any k released units" (there the
  paper's ``1..depth`` options stay).

Times are relative to ``now``: queueing that already happened is the same for every choice and
cancels out of the comparison. Algorithm 2 as printed pops the later actions from ``heap``
rather than ``tmpHeap`` (line 15); we pop from ``tmpHeap``, the evident intent. The explored
options are pruned by an exact lower bound (``estimate_remaining``).
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right, insort
from collections.abc import Iterable, Sequence
from itertools import accumulate, repeat
from operator import itemgetter

# (units of the key resource, seconds) for one estimated action
Demand = tuple[int, float]
# an explored allocation of the first remaining action: (units, seconds, extra cost), where the
# extra cost is the holding charge DPArrange would add for those units (``eviction``)
Option = tuple[int, float, float]


def _place(profile: list[float], units: int, seconds: float) -> float:
    """Start an action of ``units`` units on the *sorted* per-unit profile; return its end time.

    The profile is kept as a sorted list (a multiset of release times): the action starts at
    the ``units``-th smallest release, and its units' entries are replaced by ``units`` copies
    of its end, inserted where they sort. Three C-level list operations whatever ``units`` is,
    where a binary heap needs ``2·units`` pops and pushes (Loom's own bookkeeping).
    """
    if not profile:
        return seconds
    units = max(1, min(units, len(profile)))
    end = profile[units - 1] + seconds
    del profile[:units]
    if units == 1:
        insort(profile, end)
    else:
        at = bisect_right(profile, end)
        profile[at:at] = [end] * units
    return end


def _rest_ends(profile: list[float], rest: Sequence[Demand], single: bool) -> list[float]:
    """Place ``rest`` in FCFS order on the sorted ``profile`` (consumed); each action's end.
    ``rest`` needs at most ``len(profile)`` units per action (``_clamped``)."""
    if single and profile:
        heapreplace = heapq.heapreplace
        # a sorted list is a heap; heapreplace pops the earliest release (the action's start)
        # as it pushes start + d
        return [heapreplace(profile, profile[0] + duration) + duration for _, duration in rest]
    if not profile:
        return [duration for _, duration in rest]
    ends: list[float] = []
    _place_rest(profile, rest, repeat(0.0), 0.0, math.inf, ends)
    return ends


def _place_rest(
    profile: list[float],
    rest: Sequence[Demand],
    tails: Iterable[float],
    total: float,
    best: float,
    ends: list[float] | None = None,
) -> float:
    """``total`` plus the ends of ``rest`` placed in FCFS order on the sorted, non-empty
    ``profile`` (consumed), or inf as soon as ``tails`` (the least the unplaced suffix adds)
    show it cannot beat ``best``; each end is appended to ``ends`` when given. ``rest`` as
    for ``_rest_ends``.

    ``_place`` inlined, the estimate's hot loop: the releases an action takes are the
    smallest ones left, so instead of deleting them the loop moves ``low`` past them (the
    live profile is ``profile[low:]``, still sorted, and ``end`` sorts after every taken
    release); the same values in the same order, one list operation less per action.
    """
    low = 0
    for (units, duration), tail in zip(rest, tails, strict=False):
        if units <= 1:
            end = profile[low] + duration
            low += 1
            profile.insert(bisect_right(profile, end, low), end)
        else:
            end = profile[low + units - 1] + duration
            low += units
            at = bisect_right(profile, end, low)
            profile[at:at] = [end] * units
        total += end
        if ends is not None:
            ends.append(end)
        if total + tail >= best:
            return math.inf
    return total


def _clamped(rest: Sequence[Demand], size: int) -> Sequence[Demand]:
    """``rest`` with no action needing more than ``size`` units (an action wider than the
    profile starts when its last unit is released: ``_place``'s clamp, done once)."""
    if rest and max(map(itemgetter(0), rest)) > size:
        return [(units if units < size else size, duration) for units, duration in rest]
    return rest


def estimate_remaining(
    profile: Sequence[float],
    first_options: Sequence[Option],
    rest: Sequence[Demand],
    single: bool | None = None,
    limit: float = math.inf,
) -> float:
    """Algorithm 2 ``estimate`` on a per-unit profile: the remaining actions' summed ends.

    ``profile``: release times (relative to now) of every unit of the key resource in the group,
    in any order. ``first_options``: the first remaining action's explored allocations (their
    extra cost counts in the total, not in the times). ``rest``: the others, in FCFS order, at
    the units admission would reserve; ``single``: whether each of them needs one unit
    (computed when not given). ``limit``: a caller that only needs to know whether the estimate
    is below ``limit`` gets inf as soon as no option can be (the greedy eviction's trials).

    Shortcuts, all exact: a placement always takes the smallest release times, so only the
    smallest ``reach`` of them (the most units the estimate can take) are kept, sorted (a sorted
    list is a heap). Placing an action only delays the releases and FCFS placement is monotone
    in them, so every rest action ends no earlier than it would with the first action absent:
    those ends (one placement, ``floor``) bound each option from below, before its placement
    (options are tried cheapest bound first and skipped once the bound cannot win) and during
    it (the unplaced suffix adds at least its ``floor`` ends).
    """
    if not first_options:
        return 0.0
    if single is None:
        single = all(units <= 1 for units, _ in rest)
    reach = max(units for units, _, _ in first_options)
    reach += len(rest) if single else sum(map(itemgetter(0), rest))
    starts = sorted(profile)[:reach]
    if not single:
        rest = _clamped(rest, len(starts))
    if len(first_options) == 1 and limit == math.inf:
        units, seconds, extra = first_options[0]
        heap = list(starts)
        return _place(heap, units, seconds) + extra + sum(_rest_ends(heap, rest, single))
    floor = _rest_ends(list(starts), rest, single)
    # tails[i]: the least the rest after index i can still add
    suffix_sums = list(accumulate(reversed(floor)))[::-1]
    least_rest = suffix_sums[0] if suffix_sums else 0.0
    tails = [*suffix_sums[1:], 0.0] if suffix_sums else []
    bounded = []
    for units, seconds, extra in first_options:
        start = starts[min(units, len(starts)) - 1] if starts else 0.0
        bounded.append((start + seconds + extra + least_rest, units, seconds, extra))
    bounded.sort()
    best = limit
    found = math.inf  # the best total below the limit
    heapreplace = heapq.heapreplace
    durations = [seconds for _, seconds in rest] if single else []
    for bound, units, seconds, extra in bounded:
        if bound >= best:
            break
        heap = list(starts)
        total = _place(heap, units, seconds) + extra
        if single and heap and best == math.inf:  # nothing to prune against yet
            total += sum([heapreplace(heap, heap[0] + d) + d for d in durations])
        elif single and heap:
            for duration, tail in zip(durations, tails, strict=True):
                end = heap[0] + duration
                heapreplace(heap, end)
                total += end
                if total + tail >= best:
                    total = math.inf
                    break
        elif heap:
            total = _place_rest(heap, rest, tails, total, best)
        else:
            total += sum([seconds for _, seconds in rest])
        if total < best:
            best = found = total
    return found


def approximated_objective(
    candidate_total: float,
    profile: Sequence[float],
    first_options: Sequence[Option],
    rest: Sequence[Demand],
    single: bool | None = None,
    limit: float = math.inf,
) -> float:
    """Algorithm 2 ``getApproximatedObjective``: exact candidate ACTs + estimated rest.

    ``profile`` is the per-unit release profile after the candidates start, in any order.
    ``limit``: only whether the objective is below it matters; inf once it cannot be.
    """
    if limit != math.inf:
        limit -= candidate_total
    remaining = estimate_remaining(profile, first_options, rest, single, limit)
    return candidate_total + remaining
