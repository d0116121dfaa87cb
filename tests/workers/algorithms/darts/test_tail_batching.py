"""Tail Batching's round planning (darts App. H): short rounds over N', deferral, re-computation."""

from __future__ import annotations

from collections import deque

import pytest

from workers.algorithms.darts import TailBatchingPlanner


def test_short_round_over_n_prime_then_recompute_the_deferred():
    planner: TailBatchingPlanner[int] = TailBatchingPlanner(prompts_per_step=2, ratio=2.0)
    fresh = deque(range(10))
    first = planner.next_round(fresh)
    assert first is not None
    assert (first.prompts, first.recompute, first.stop_after_groups) == ((0, 1, 2, 3), False, 2)
    planner.round_finished(first, [True, False, True, False])
    assert planner.deferred == (1, 3)
    # N deferred prompts are re-computed before any fresh one is drawn
    second = planner.next_round(fresh)
    assert second is not None
    assert (second.prompts, second.recompute, second.stop_after_groups) == ((1, 3), True, None)
    planner.round_finished(second, [True, True])
    assert planner.deferred == ()
    third = planner.next_round(fresh)
    assert third is not None and third.prompts == (4, 5, 6, 7)


def test_end_of_stream_flushes_the_queue_and_stops():
    planner: TailBatchingPlanner[str] = TailBatchingPlanner(prompts_per_step=3, ratio=1.5)
    fresh = deque(["a", "b", "c"])
    short = planner.next_round(fresh)
    assert short is not None and short.stop_after_groups is None  # no more than N left
    planner.round_finished(short, [True, False, True])
    flush = planner.next_round(fresh)
    assert flush is not None and (flush.prompts, flush.recompute) == (("b",), True)
    planner.round_finished(flush, [True])
    assert planner.next_round(fresh) is None


def test_rejects_bad_settings_and_flags():
    with pytest.raises(ValueError):
        TailBatchingPlanner(prompts_per_step=4, ratio=0.5)
    with pytest.raises(ValueError):
        TailBatchingPlanner(prompts_per_step=0, ratio=2.0)
    planner: TailBatchingPlanner[int] = TailBatchingPlanner(prompts_per_step=1, ratio=2.0)
    round_ = planner.next_round(deque([1, 2]))
    assert round_ is not None
    with pytest.raises(ValueError):
        planner.round_finished(round_, [True])


def test_response_over_provisioning_widens_short_rounds_only():
    planner: TailBatchingPlanner[int] = TailBatchingPlanner(
        prompts_per_step=2, ratio=2.0, group_size=8, response_ratio=1.25
    )
    fresh = deque(range(4))
    short = planner.next_round(fresh)
    assert short is not None and short.samples_per_prompt == 10  # RollPacker: 10 of 8
    planner.round_finished(short, [True, False, True, False])
    long = planner.next_round(fresh)
    assert long is not None and long.recompute and long.samples_per_prompt == 8
    with pytest.raises(ValueError):
        TailBatchingPlanner(prompts_per_step=2, ratio=1.0, response_ratio=1.25)
    with pytest.raises(ValueError):
        TailBatchingPlanner(prompts_per_step=2, ratio=1.0, group_size=8, response_ratio=0.5)
