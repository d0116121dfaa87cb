"""Heddle's DP group limit on the live path (heddle §5.2): at most ``group_limit`` trajectories per
worker's group, and never a plan that cannot hold every active trajectory."""

from __future__ import annotations

from workers.router.policies import HeddlePolicy, make_policy
from workers.router.pool import LLMWorker
from workers.router.trajectories import TrajectoryState
from workers.router.upstream import Upstream


def _fleet(count: int) -> list[LLMWorker]:
    return [
        LLMWorker(f"w{i}", f"http://127.0.0.1:{9000 + i}", Upstream(f"http://127.0.0.1:{9000 + i}"))
        for i in range(count)
    ]


def _states(lengths: list[float]) -> list[TrajectoryState]:
    states = []
    for i, length in enumerate(lengths):
        state = TrajectoryState(f"t{i}", "7", f"p{i}", "", created_at=0.0)
        state.predicted_remaining = length
        states.append(state)
    return states


def _route_all(policy: HeddlePolicy, lengths: list[float], workers: int) -> dict[str, int]:
    fleet = _fleet(workers)
    states = _states(lengths)
    for state in states:
        policy._rank(state)
    counts = {w.name: 0 for w in fleet}
    for state in states:
        counts[policy.choose(state, fleet).name] += 1
    return counts


def _long_tail(count: int) -> list[float]:
    """Four long trajectories and many short ones."""
    return [8000.0] * 4 + [500.0 - i for i in range(count - 4)]


def test_without_a_limit_the_short_trajectories_crowd_the_last_worker() -> None:
    counts = _route_all(HeddlePolicy(batch_limit=4, replan_s=3600), _long_tail(40), 2)
    assert counts["w1"] > 20


def test_the_group_limit_caps_each_workers_group() -> None:
    lengths = _long_tail(40)
    policy = HeddlePolicy(batch_limit=4, group_limit=20, replan_s=3600)
    assert _route_all(policy, lengths, 2) == {"w0": 20, "w1": 20}
    assert max(policy.group_sizes) <= 20


def test_more_trajectories_than_the_limits_hold_are_spread_not_refused() -> None:
    lengths = _long_tail(50)
    policy = make_policy("heddle", batch_limit=4, group_limit=20)
    assert isinstance(policy, HeddlePolicy)
    assert sum(_route_all(policy, lengths, 2).values()) == 50
    assert max(policy.group_sizes) <= 25
