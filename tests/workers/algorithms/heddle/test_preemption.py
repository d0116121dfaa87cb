"""The one preemption rule (heddle §4.2, Alg. 1): strictly outranked victims, all or nothing."""

from __future__ import annotations

from collections.abc import Iterator

from workers.algorithms.heddle.preemption import Admits, preemption_key, victims_to_admit


def _room(capacity: float, used: float, needed: float) -> Admits:
    return lambda freed, victims: used - freed + needed <= capacity


def test_victims_are_taken_until_together_they_admit_the_request() -> None:
    running = [(0.0, 30.0), (1.0, 30.0), (2.0, 30.0)]
    assert victims_to_admit(5.0, running, _room(100.0, 90.0, 40.0)) == 1
    assert victims_to_admit(5.0, running, _room(100.0, 90.0, 60.0)) == 2


def test_nobody_is_preempted_when_the_outranked_victims_would_not_make_room() -> None:
    running = [(0.0, 30.0), (7.0, 30.0)]
    assert victims_to_admit(5.0, running, _room(100.0, 90.0, 60.0)) == 0


def test_equal_priority_never_preempts() -> None:
    assert victims_to_admit(1.0, [(1.0, 50.0)], _room(100.0, 90.0, 10.0)) == 0


def test_candidates_are_read_only_as_far_as_the_answer_needs() -> None:
    read: list[int] = []

    def candidates() -> Iterator[tuple[float, float]]:
        for i in range(10):
            read.append(i)
            yield (0.0, 10.0)

    assert victims_to_admit(1.0, candidates(), lambda freed, victims: victims == 3) == 3
    assert read == [0, 1, 2]


def test_preemption_order_is_lowest_priority_then_latest_admitted() -> None:
    running = {"a": (1.0, 1), "b": (0.0, 2), "c": (1.0, 3)}
    order = sorted(running, key=lambda rid: preemption_key(*running[rid]))
    assert order == ["b", "c", "a"]
