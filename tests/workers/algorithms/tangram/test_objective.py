"""The Alg. 2 estimate on a per-unit profile, the exploration set and the holding price."""

from __future__ import annotations

import heapq

import pytest

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler
from workers.algorithms.tangram.action import ActionSpec, Elasticity, ResourceDemand
from workers.algorithms.tangram.eviction import holding_price
from workers.algorithms.tangram.objective import approximated_objective, estimate_remaining


def _heap(values: list[float]) -> list[float]:
    heapq.heapify(values)
    return values


def test_single_unit_actions_reduce_to_algorithm_2() -> None:
    # two units free at 1 s and 3 s; three one-unit actions of 2 s each, FCFS
    total = estimate_remaining(_heap([1.0, 3.0]), [(1, 2.0, 0.0)], [(1, 2.0), (1, 2.0)])
    # ends: 3 (unit@1), 5 (unit@3), 5 (unit@3 again) -> 13
    assert total == pytest.approx(3.0 + 5.0 + 5.0)


def test_a_wide_action_starts_when_enough_units_are_released() -> None:
    profile = [4.0, 0.0, 4.0, 0.0]
    # four units: starts at 4 (the fourth release), not at 0 as a per-action heap would say
    assert estimate_remaining(profile, [(4, 1.0, 0.0)], []) == pytest.approx(5.0)
    # the explored options pick the best: two units now (0 + 3) beats four units at 4 + 1
    assert estimate_remaining(profile, [(2, 3.0, 0.0), (4, 1.0, 0.0)], []) == pytest.approx(3.0)


def test_a_wide_start_delays_the_actions_queued_behind_it() -> None:
    profile = _heap([0.0, 0.0, 0.0, 0.0])
    rest = [(1, 1.0)] * 4
    narrow = estimate_remaining(profile, [(1, 4.0, 0.0)], rest)
    wide = estimate_remaining(profile, [(4, 1.5, 0.0)], rest)
    # narrow: 4 + ends 1,1,1,2 = 9; wide: 1.5 + ends 2.5 x4 = 11.5
    assert narrow == pytest.approx(9.0) and wide == pytest.approx(11.5)
    assert estimate_remaining(profile, [(4, 1.5, 0.0), (1, 4.0, 0.0)], rest) == pytest.approx(9.0)
    # an extra cost counts in the total only
    assert estimate_remaining(profile, [(1, 4.0, 3.0)], rest) == pytest.approx(12.0)


def test_objective_adds_the_exact_candidate_total() -> None:
    assert approximated_objective(7.0, [2.0, 0.0], [(1, 1.0, 0.5)], []) == pytest.approx(8.5)
    assert approximated_objective(7.0, [0.0], [], [(1, 1.0)]) == pytest.approx(7.0)


def _reward(action_id: str, t1: float = 60.0) -> ActionSpec:
    return ActionSpec(
        action_id,
        {"cpu": ResourceDemand.between(1, 32)},
        tool="pytest",
        key_resource="cpu",
        elasticity=Elasticity.amdahl(0.95, 32),
        t1=t1,
    )


def _pool(cores: int) -> CpuTopology:
    return CpuTopology([CpuNodeSpec.uniform("n0", cores, 1, memory_mb=1 << 20)])


def test_exploration_keeps_the_papers_depth_and_adds_the_doubling_ladder() -> None:
    scheduler = ElasticScheduler(_pool(64), depth=2)
    assert scheduler._sizing.exploration_units(_reward("r")) == (1, 2, 4, 8, 16, 32)
    scheduler.set_policy(min_dop=3, max_dop=20)
    assert scheduler._sizing.exploration_units(_reward("r")) == (3, 4, 6, 12, 20)


def test_holding_price_is_the_others_share_of_the_units() -> None:
    assert holding_price(0, 256) == 0.0
    assert holding_price(32, 256) == pytest.approx(0.125)
    assert holding_price(-1, 8) == 0.0
    assert holding_price(3, 0) == 0.0


def test_a_crowded_pool_gives_an_inefficient_action_fewer_units_than_an_empty_one() -> None:
    alone = ElasticScheduler(_pool(64))
    alone.submit(_reward("r"), 0.0)
    (wide,) = alone.schedule(0.0)
    assert wide.dop == 32  # nobody else: no price, the shortest duration wins

    crowded = ElasticScheduler(_pool(64))
    for i in range(24):  # 24 one-core actions running, each for a long time
        crowded.submit(
            ActionSpec(f"e{i}", {"cpu": ResourceDemand.exactly(1)}, tool="env", t1=100.0), 0.0
        )
    crowded.schedule(0.0)
    crowded.submit(_reward("r"), 0.0)
    (narrower,) = crowded.schedule(0.0)
    assert 1 < narrower.dop < 32


def test_a_burst_on_an_idle_gpu_pool_fills_it() -> None:
    """Deferring cannot look cheaper merely because the estimate leaves out the restores the
    candidates pay: an idle pool given many more actions than GPUs starts most of its GPUs."""
    from workers.algorithms.tangram import GpuServiceSpec, GpuTopology

    services = {f"s{i}": GpuServiceSpec(f"s{i}", weights_mb=16_000.0) for i in range(4)}
    scheduler = ElasticScheduler(GpuTopology(["g0", "g1"], services, gpus_per_node=8))
    for n in range(64):
        service = f"s{n % 4}"
        scheduler.submit(
            ActionSpec(
                f"a{n}",
                {"gpu": ResourceDemand.one_of([1, 2, 4, 8])},
                tool=service,
                service=service,
                key_resource="gpu",
                elasticity=Elasticity.from_points({1: 1.0, 2: 0.92, 4: 0.85, 8: 0.7}, 8),
                t1=30.0,
            ),
            0.0,
        )
    started = scheduler.schedule(0.0)
    assert sum(a.dop for a in started) >= 12


def test_the_rest_model_is_checked() -> None:
    with pytest.raises(ValueError, match="rest_model"):
        ElasticScheduler(_pool(8), rest_model="widest")


def _contended(rest_model: str) -> list[int]:
    """A node full of long one-core rewards with many more queued; one core frees at a time."""
    scheduler = ElasticScheduler(_pool(32), rest_model=rest_model)
    for i in range(96):
        scheduler.submit(_reward(f"r{i}", t1=60.0 + i), 0.0)
    running = [a.action_id for a in scheduler.schedule(0.0)]
    dops: list[int] = []
    now = 0.0
    while running and len(dops) < 40:
        now += 1.0
        scheduler.complete(running.pop(0), now)
        started = scheduler.schedule(now)
        running += [a.action_id for a in started]
        dops += [a.dop for a in started]
    return dops


def test_estimating_the_rest_at_their_priced_allocation_starts_rewards_wider() -> None:
    """Under the paper's model (every remaining action at one core) a freed core always looks
    best spent at once, so a crowded node starts its rewards narrow; estimating the rest at the
    allocation the holding price gives them credits waiting for a few cores."""
    minimum, efficient = _contended("minimum"), _contended("efficient")
    assert sum(minimum) / len(minimum) < sum(efficient) / len(efficient)


@pytest.mark.parametrize("rest_model", ["efficient", "minimum"])
def test_a_capped_burst_on_an_idle_node_fills_it(rest_model: str) -> None:
    """Units a pass leaves idle reach the deferred actions only at the next pass (the next
    completion), so a pass that admits a few candidates of a burst cannot defer them for free
    and leave the node idle."""
    scheduler = ElasticScheduler(_pool(64), rest_model=rest_model, candidate_cap=4)
    for i in range(100):
        scheduler.submit(_reward(f"r{i}", t1=30.0 + i % 7), 0.0)
    started = scheduler.schedule(0.0)
    while scheduler.next_wakeup(0.0) == 0.0:
        started += scheduler.schedule(0.0)
    assert sum(a.dop for a in started) == 64
