from __future__ import annotations

import pytest

from workers.algorithms.heddle.priority import (
    PriorityPolicy,
    PriorityQueue,
    request_priority,
    should_preempt,
)


def test_queue_pops_highest_first_with_fifo_ties() -> None:
    queue = PriorityQueue()
    for item, priority in [("a", 1.0), ("b", 5.0), ("c", 5.0), ("d", 3.0)]:
        queue.push(item, priority)
    assert [queue.pop()[0] for _ in range(4)] == ["b", "c", "d", "a"]
    with pytest.raises(IndexError):
        queue.peek()


def test_lowest_first_queue_remove_and_update() -> None:
    queue = PriorityQueue(highest_first=False)
    queue.push("x", 2.0)
    queue.push("y", 1.0)
    queue.push("z", 3.0)
    assert queue.peek() == ("y", 1.0)
    assert queue.remove("y") and not queue.remove("y")
    queue.update("z", 0.5)
    assert queue.pop() == ("z", 0.5)
    assert len(queue) == 1 and "x" in queue
    with pytest.raises(KeyError):
        queue.push("x", 1.0)


def test_policies_order_requests() -> None:
    def prio(policy: PriorityPolicy, predicted: float, arrival: float, submitted: float) -> float:
        return request_priority(
            policy,
            predicted_total_tokens=predicted,
            trajectory_arrival=arrival,
            step_submitted_at=submitted,
        )

    long_late = dict(predicted=9000.0, arrival=5.0, submitted=50.0)
    short_early = dict(predicted=100.0, arrival=1.0, submitted=10.0)
    assert prio(PriorityPolicy.PPS, **long_late) > prio(PriorityPolicy.PPS, **short_early)
    assert prio(PriorityPolicy.SHORTEST_FIRST, **short_early) > prio(
        PriorityPolicy.SHORTEST_FIRST, **long_late
    )
    assert prio(PriorityPolicy.FCFS, **short_early) > prio(PriorityPolicy.FCFS, **long_late)
    # round-robin: a returning step goes behind a step submitted earlier, whatever its trajectory
    returning = dict(predicted=9000.0, arrival=0.0, submitted=60.0)
    assert prio(PriorityPolicy.ROUND_ROBIN, **long_late) > prio(
        PriorityPolicy.ROUND_ROBIN, **returning
    )
    assert prio(PriorityPolicy.FCFS, **returning) > prio(PriorityPolicy.FCFS, **long_late)
    assert PriorityPolicy.PPS.preemptive and not PriorityPolicy.ROUND_ROBIN.preemptive


def test_pps_remaining_keys_by_the_predicted_tokens_left() -> None:
    def prio(policy: PriorityPolicy, predicted: float, so_far: float) -> float:
        return request_priority(
            policy,
            predicted_total_tokens=predicted,
            trajectory_arrival=0.0,
            step_submitted_at=0.0,
            tokens_so_far=so_far,
        )

    nearly_done, fresh = (9000.0, 8500.0), (2000.0, 0.0)
    assert prio(PriorityPolicy.PPS, *nearly_done) > prio(PriorityPolicy.PPS, *fresh)
    assert prio(PriorityPolicy.PPS_REMAINING, *fresh) > prio(
        PriorityPolicy.PPS_REMAINING, *nearly_done
    )
    assert prio(PriorityPolicy.PPS_REMAINING, *fresh) == 2000.0
    assert PriorityPolicy.PPS_REMAINING.preemptive
    assert PriorityPolicy.PPS_REMAINING.uses_prediction


def test_preemption_only_when_full_and_strictly_outranked() -> None:
    assert should_preempt(top_pending_priority=5, lowest_running_priority=4, batch_full=True)
    assert not should_preempt(top_pending_priority=4, lowest_running_priority=4, batch_full=True)
    assert not should_preempt(top_pending_priority=9, lowest_running_priority=1, batch_full=False)
