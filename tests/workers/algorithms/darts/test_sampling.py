"""Alg. 2 (darts App. D): dual-end selection, tail pruning and early-stop decisions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.algorithms.darts import (
    DartsConfig,
    GroupRollout,
    SamplingMode,
    plan_batch,
    sampling_mode,
    select_training_groups,
)


def select_one(lengths, truncated=None, *, group_size, longest=1, pruned=False, present=None):
    lengths = np.asarray([lengths], dtype=float)
    truncated = np.zeros_like(lengths, bool) if truncated is None else np.asarray([truncated])
    present = np.ones_like(lengths, bool) if present is None else np.asarray([present])
    mask = select_training_groups(
        lengths, present, truncated, np.array([pruned]), group_size=group_size, longest=longest
    )
    return np.flatnonzero(mask[0]).tolist()


def test_dual_end_keeps_k_shortest_and_l_longest():
    lengths = [50, 10, 90, 30, 70, 20, 60]
    # M = 4, L = 1: shortest three (10, 20, 30) + longest (90)
    assert select_one(lengths, group_size=4) == [1, 2, 3, 5]
    # L = 2: shortest two (10, 20) + longest two (90, 70)
    assert select_one(lengths, group_size=4, longest=2) == [1, 2, 4, 5]


def test_truncated_samples_are_never_the_longest():
    lengths = [10, 20, 30, 100, 100, 80]
    truncated = [False, False, False, True, True, False]
    # the longest *valid* one is 80, not the truncated 100s
    assert select_one(lengths, truncated, group_size=4) == [0, 1, 2, 5]


def test_truncated_samples_fill_in_only_when_valid_ones_run_out():
    lengths = [10, 100, 100, 100]
    truncated = [False, True, True, True]
    kept = select_one(lengths, truncated, group_size=3)
    assert kept[0] == 0 and len(kept) == 3


def test_shortest_only_prefers_valid_samples():
    lengths = [40, 10, 5, 30, 20, 50]
    truncated = [False, False, True, False, False, False]
    # pruned: M = 3 shortest valid — the truncated 5 is not "short", it is incomplete
    assert select_one(lengths, truncated, group_size=3, pruned=True) == [1, 3, 4]


def test_absent_slots_are_never_kept():
    lengths = [10, 20, 30, 5, 1]
    present = [True, True, True, False, False]
    assert select_one(lengths, group_size=4, present=present) == [0, 1, 2]


@settings(max_examples=50, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 100), min_size=4, max_size=12),
    truncated_bits=st.lists(st.booleans(), min_size=12, max_size=12),
    group_size=st.integers(1, 4),
    pruned=st.booleans(),
)
def test_selection_matches_reference(lengths, truncated_bits, group_size, pruned):
    truncated = truncated_bits[: len(lengths)]
    kept = select_one(lengths, truncated, group_size=group_size, pruned=pruned)
    order = sorted(range(len(lengths)), key=lambda i: (truncated[i], lengths[i], i))
    if pruned:
        expected = set(order[:group_size])
    else:
        shortest = set(order[: group_size - 1])
        valid_rest = [i for i in range(len(lengths)) if i not in shortest and not truncated[i]]
        longest = sorted(valid_rest, key=lambda i: (-lengths[i], i))[:1]
        expected = shortest | set(longest)
        for i in order:
            if len(expected) >= group_size:
                break
            expected.add(i)
    assert set(kept) == expected
    assert len(kept) == group_size


def test_sampling_mode_switches_at_upper_bound():
    assert sampling_mode(12, 16) is SamplingMode.DUAL_END
    assert sampling_mode(16, 16) is SamplingMode.SHORTEST_ONLY
    assert sampling_mode(16, 16, tail_pruning=False) is SamplingMode.DUAL_END


def test_dual_end_group_waits_for_every_sample():
    group = GroupRollout(allocated=5, group_size=3, upper=6)
    decisions = [group.sample_finished(s, length, False) for s, length in enumerate([4, 2, 9, 1])]
    assert not any(d.complete for d in decisions)
    final = group.sample_finished(4, 7, False)
    assert final.complete and final.abort == ()
    assert group.kept() == (1, 2, 3)  # two shortest (1, 2) + longest (9)


def test_pruned_group_stops_early_and_names_running_samples():
    group = GroupRollout(allocated=6, group_size=3, upper=6)
    assert group.mode is SamplingMode.SHORTEST_ONLY
    assert not group.sample_finished(4, 10, False).complete
    assert not group.sample_finished(1, 12, True).complete  # truncated: not a valid finish
    assert not group.sample_finished(0, 15, False).complete
    decision = group.sample_finished(5, 20, False)
    assert decision.complete
    assert decision.abort == (2, 3)
    assert group.running() == ()
    assert group.kept() == (0, 4, 5)
    # a sample that finished while its abort was in flight is ignored
    assert group.sample_finished(2, 25, False).complete
    assert group.kept() == (0, 4, 5)


def test_pruned_group_without_enough_valid_samples_completes_at_the_end():
    group = GroupRollout(allocated=4, group_size=3, upper=4)
    for sample in range(3):
        assert not group.sample_finished(sample, 100, True).complete
    decision = group.sample_finished(3, 50, False)
    assert decision.complete and decision.abort == ()
    assert len(group.kept()) == 3 and 3 in group.kept()


def test_group_rollout_rejects_bad_reports():
    group = GroupRollout(allocated=3, group_size=2, upper=4)
    group.sample_finished(0, 5, False)
    with pytest.raises(ValueError, match="twice"):
        group.sample_finished(0, 5, False)
    with pytest.raises(ValueError, match="outside"):
        group.sample_finished(3, 5, False)
    with pytest.raises(RuntimeError):
        group.kept()
    with pytest.raises(ValueError):
        GroupRollout(allocated=1, group_size=2, upper=4)


def test_plan_batch_marks_saturated_prompts_for_pruning():
    config = DartsConfig(group_size=4)
    plan = plan_batch(
        [1.0, 100.0, 2.0, 300.0], config=config, rho=1.0, cost_slope=1.0, total_budget=16 + 8
    )
    assert plan.total_budget == 24
    assert plan.allocations.tolist()[3] == 8
    assert plan.shortest_only.tolist() == [a == 8 for a in plan.allocations]
    rollouts = plan.group_rollouts(config)
    assert [r.mode is SamplingMode.SHORTEST_ONLY for r in rollouts] == plan.shortest_only.tolist()
    no_pruning = plan_batch(
        [1.0, 100.0, 2.0, 300.0],
        config=DartsConfig(group_size=4, tail_pruning=False),
        rho=1.0,
        cost_slope=1.0,
        total_budget=24,
    )
    assert not no_pruning.shortest_only.any()


def test_plan_batch_adaptive_budget_is_clipped():
    config = DartsConfig(group_size=4, trade_off=1.0)
    assert plan_batch([1.0] * 5, config=config, rho=0.0, cost_slope=1.0).total_budget == 20
    assert plan_batch([1.0] * 5, config=config, rho=1e6, cost_slope=1.0).total_budget == 40
