"""GroupRollout's streaming answers (darts §4.3.2): a sample called settled early is in the final
group whatever the other candidates do afterwards; lost candidates leave the pool."""

from __future__ import annotations

import numpy as np
import pytest

from workers.algorithms.darts.sampling import GroupRollout


def _future_never_unsettles(rng: np.random.Generator) -> int:
    group_size = int(rng.integers(2, 6))
    allocated = int(rng.integers(group_size, 2 * group_size + 1))
    group = GroupRollout(
        allocated=allocated,
        group_size=group_size,
        upper=2 * group_size,
        longest=int(rng.integers(0, 2)),
    )
    lengths = rng.integers(1, 30, size=allocated)
    truncated = rng.random(allocated) < 0.2
    lost = rng.random(allocated) < 0.1
    order = rng.permutation(allocated)
    settled: set[int] = set()
    floors: dict[int, int] = {}
    checks = 0
    for step, sample in enumerate(order):
        # the others have produced more of their tokens by now: floors grow, up to the length
        for r in group.running():
            floors[r] = int(rng.integers(floors.get(r, 0), lengths[r] + 1))
        floors.pop(int(sample), None)
        if lost[sample] and allocated - len(group.lost) - 1 >= group_size:
            decision = group.sample_lost(int(sample))
        else:
            length = float(lengths[sample])
            decision = group.sample_finished(int(sample), length, bool(truncated[sample]))
        if decision.complete:
            break
        now = set(group.surely_kept(floors))
        assert settled <= now, "a settled sample became unsettled"
        settled = now
        checks += step
    kept = set(group.kept())
    assert settled <= kept
    assert len(kept) == min(group_size, allocated - len(group.lost) - len(group.aborted))
    return checks


def test_settled_samples_are_always_kept() -> None:
    rng = np.random.default_rng(7)
    assert sum(_future_never_unsettles(rng) for _ in range(3000)) > 0


def test_the_shortest_finisher_is_settled_once_every_other_candidate_is_past_it() -> None:
    group = GroupRollout(allocated=6, group_size=4, upper=8)  # dual-end: K = 3, L = 1
    group.sample_finished(2, 10, False)
    assert group.surely_kept({0: 0, 1: 0, 3: 0, 4: 0, 5: 0}) == ()  # five could end shorter
    assert group.surely_kept({0: 11, 1: 11, 3: 11, 4: 0, 5: 0}) == (2,)  # two could: 2 < K
    assert group.surely_kept({0: 11, 1: 11, 3: 11, 4: 11, 5: 11}) == (2,)


def test_a_floor_equal_to_the_length_precedes_only_from_a_lower_slot() -> None:
    group = GroupRollout(allocated=4, group_size=2, upper=8, longest=1)  # K = 1
    group.sample_finished(2, 10, False)
    assert group.surely_kept({0: 11, 1: 11, 3: 10}) == (2,)
    assert group.surely_kept({0: 11, 1: 10, 3: 11}) == ()


def test_tail_pruning_keeps_every_valid_finisher_at_once() -> None:
    group = GroupRollout(allocated=8, group_size=4, upper=8)
    group.sample_finished(5, 30, False)
    group.sample_finished(1, 99, True)  # truncated: decided at the end
    assert group.surely_kept({}) == (5,)


def test_lost_candidates_leave_the_pool_and_the_group_completes_without_them() -> None:
    group = GroupRollout(allocated=5, group_size=3, upper=6)
    for sample, length in ((0, 4.0), (1, 9.0), (2, 6.0)):
        group.sample_finished(sample, length, False)
    assert not group.sample_lost(3).complete
    decision = group.sample_finished(4, 20.0, False)
    assert decision.complete and decision.abort == ()
    assert group.kept() == (0, 2, 4)  # K = 2 shortest (0, 2) and the longest (4)
    assert group.lost == (3,)


def test_with_no_more_than_m_candidates_left_every_finisher_is_kept() -> None:
    group = GroupRollout(allocated=4, group_size=3, upper=6)
    group.sample_lost(0)
    group.sample_finished(3, 50, True)
    assert group.surely_kept({}) == (3,)


def test_a_sample_cannot_be_lost_after_it_finished() -> None:
    group = GroupRollout(allocated=4, group_size=3, upper=6)
    group.sample_finished(1, 5, False)
    with pytest.raises(ValueError, match="twice"):
        group.sample_lost(1)
