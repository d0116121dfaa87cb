"""The estimate's allocation for a remaining action under the holding price (``sizing``)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from workers.algorithms.tangram import CpuNodeSpec, CpuTopology, ElasticScheduler
from workers.algorithms.tangram.action import ActionSpec, Elasticity, ResourceDemand
from workers.algorithms.tangram.entries import Waiting
from workers.algorithms.tangram.sizing import _inverse_speedup, _price_envelope


def _reward(action_id: str, parallel: float = 0.95, t1: float = 60.0) -> ActionSpec:
    return ActionSpec(
        action_id,
        {"cpu": ResourceDemand.between(1, 32)},
        tool="pytest",
        key_resource="cpu",
        elasticity=Elasticity.amdahl(parallel, 32),
        t1=t1,
    )


def _scheduler() -> ElasticScheduler:
    return ElasticScheduler(CpuTopology([CpuNodeSpec.uniform("n0", 64, 1, memory_mb=1 << 20)]))


@pytest.mark.parametrize("seed", range(20))
def test_the_price_envelope_is_the_cheapest_ladder_option_at_every_price(seed: int) -> None:
    rng = random.Random(seed)
    spec = _reward("r", parallel=rng.uniform(0.5, 1.0), t1=rng.uniform(1, 100))
    units = (1, 2, 4, 8, 16, 32)
    assert spec.elasticity is not None
    inverse = [float(_inverse_speedup(spec.elasticity, 33)[u]) for u in units]
    thresholds, demands = _price_envelope(units, inverse, 10.0)
    assert thresholds == sorted(thresholds)
    for _ in range(50):
        price = rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0, 5)])
        costs = {
            k: inv + price * max(0.0, k * inv - inverse[0])
            for k, inv in zip(units, inverse, strict=True)
        }
        k, seconds = demands[sum(1 for t in thresholds if t <= price)]
        assert costs[k] == pytest.approx(min(costs.values()))
        assert seconds == pytest.approx(10.0 * inverse[units.index(k)])


def test_a_remaining_action_is_estimated_wide_when_cheap_and_narrow_when_crowded() -> None:
    scheduler = _scheduler()
    sizing = scheduler._sizing
    entry = Waiting(_reward("r"), 0.0)
    assert sizing.efficient_demand(entry, 0.0)[0] == 32  # nothing to take units from
    units, seconds = sizing.efficient_demand(entry, 2.0)
    assert 1 < units < 32 and seconds == pytest.approx(_reward("r").duration(units))
    assert sizing.efficient_demand(entry, 1e6)[0] == 1
    # the envelope follows a policy change (here: the ladder narrowed by max_dop)
    scheduler.set_policy(max_dop=4)
    assert sizing.efficient_demand(entry, 0.0)[0] == 4


def test_a_non_elastic_remaining_action_keeps_its_minimum() -> None:
    sizing = _scheduler()._sizing
    spec = ActionSpec("e", {"cpu": ResourceDemand.exactly(2)}, key_resource="cpu", t1=3.0)
    env = Waiting(spec, 0.0)
    assert sizing.efficient_demand(env, 0.0) == (2, pytest.approx(3.0))
    assert sizing.efficient_demand(env, 5.0) == (2, pytest.approx(3.0))


@pytest.mark.parametrize("width", [1, 3, 8, 17, 32, 64])
def test_the_cached_wasted_work_row_is_the_direct_formula_at_every_width(width: int) -> None:
    spec = _reward("r", parallel=0.9)
    assert spec.elasticity is not None
    shape = _scheduler()._sizing.cost_shape(spec, width)
    inverse, least = shape.inverse_speedup, shape.options[0]
    work = np.arange(inverse.shape[0]) * inverse - least * inverse[least]
    direct = np.where(np.isfinite(shape.mask), np.maximum(work, 0.0), 0.0)
    wasted = shape.wasted_work()
    assert wasted.shape == direct.shape
    assert np.array_equal(wasted, direct)  # bit for bit: the decisions must not move
    assert not wasted.flags.writeable
