"""An epoch of steps under every strategy, DARTS's budget state and Tail Batching's rounds."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from workers.sim.darts.epoch import run_epoch
from workers.sim.darts.scenario import ScenarioConfig, make_prompt_set
from workers.sim.darts.tail_batching import run_tail_batching

TINY = ScenarioConfig(prompts=8, group_size=4, workers=2, max_batch=64, steps=3)


def epoch(config=TINY, seed=5):
    rng = np.random.default_rng(seed)
    profiles = make_prompt_set(config, rng, config.prompts * config.steps)
    return run_epoch(config, rng, profiles)


def test_every_strategy_trains_every_prompt_once():
    series = epoch()
    groups = TINY.prompts * TINY.steps
    for name, results in series.results.items():
        assert sum(int(r.completed.sum()) for r in results) == groups, name
        kept = sum(int(r.kept.sum()) for r in results)
        assert kept == groups * TINY.group_size, name
        assert all(s > 0 for s in series.step_seconds[name])
    assert {
        "standard",
        "darts",
        "darts_pool_moments",
        "darts_per_step_k",
        "tail_batching@1.5",
    } <= set(series.results)
    # the same first budget (λ calibrated on the same history); ρ_t's weighting differs after
    assert series.budgets["darts"][0] == series.budgets["darts_pool_moments"][0]


def test_first_budget_lands_on_the_target_and_k_is_fixed():
    series = epoch()
    nm = TINY.prompts * TINY.group_size
    assert series.budgets["darts"][0] == pytest.approx(1.5 * nm, abs=1)
    assert series.cost_slope > 0 and series.trade_off > 0
    for budget in series.budgets["darts"]:
        assert nm <= budget <= 2 * nm


def test_step_time_includes_training_after_rollout():
    series = epoch()
    for name in ("standard", "darts"):
        for seconds, rollout in zip(
            series.step_seconds[name], series.rollout_seconds[name], strict=True
        ):
            assert seconds > rollout


def test_context_engine_profiles_its_planning_curve():
    series = epoch(
        ScenarioConfig(
            prompts=8,
            group_size=4,
            workers=2,
            max_batch=64,
            steps=1,
            engine="context",
            tail_overprovision=(1.5,),
        )
    )
    assert series.ptl is not None and series.ptl.y0 > 0


def test_tail_batching_defers_and_recomputes():
    config = ScenarioConfig(prompts=4, group_size=2, workers=1, max_batch=64)
    pools = [np.array([10, 10, 10, 10]) for _ in range(8)]
    pools[0] = np.array([5000, 5000, 30, 30])  # slow in the short round, fast when recomputed
    rounds = run_tail_batching(config, pools, ratio=1.5)
    assert sum(int(r.completed.sum()) for r in rounds) == 8
    assert rounds[0].completed.sum() == 4 and not rounds[0].completed[0]
    # the deferred prompt ends up in a later round, recomputed from the spare draws
    assert any(r.name == "tail_batching_long" for r in rounds)
    with pytest.raises(ValueError):
        run_tail_batching(config, pools, ratio=0.5)


def test_fixed_budget_arms_hold_their_budget_and_prune_only_when_saturated():
    config = replace(TINY, fixed_budget_multiples=(1.0, 2.0))
    series = epoch(config)
    nm, m = TINY.prompts * TINY.group_size, TINY.group_size
    assert series.budgets["darts_fixed@1"] == [nm] * TINY.steps
    assert series.budgets["darts_fixed@2"] == [2 * nm] * TINY.steps
    for result in series.results["darts_fixed@1"]:
        assert result.allocations.tolist() == [m] * TINY.prompts
        assert result.samples_aborted == 0
    for result in series.results["darts_fixed@2"]:
        assert result.allocations.tolist() == [2 * m] * TINY.prompts
        assert int(result.kept.sum()) == nm  # every prompt tail-pruned, M kept each
    assert sum(r.samples_aborted for r in series.results["darts_fixed@2"]) > 0


def test_tail_batching_response_over_provisioning_keeps_the_first_m_finished():
    config = ScenarioConfig(prompts=2, group_size=2, workers=1, max_batch=64)
    pools = [np.array([10, 4000, 20, 30]), np.array([15, 25, 5000, 35])]
    fresh = [np.array([40, 50]), np.array([60, 70])]
    rounds = run_tail_batching(config, pools, ratio=1.0, response_ratio=1.5, recompute_pools=fresh)
    assert len(rounds) == 1 and rounds[0].completed.all()
    short = rounds[0]
    # three candidates per prompt; the first two finished are kept, the slow one aborted
    assert short.samples_submitted == 6 and short.samples_aborted == 2
    assert sorted(short.tokens[short.kept].tolist()) == [10, 15, 20, 25]
    with pytest.raises(ValueError):
        run_tail_batching(config, pools, ratio=1.0, response_ratio=1.5)


def test_tail_batching_grid_names_both_forms():
    config = replace(TINY, tail_overprovision=(1.5,), tail_response_overprovision=(1.0, 2.0))
    series = epoch(config)
    assert {"tail_batching@1.5", "tail_batching@1.5x2"} <= set(series.results)
    groups = TINY.prompts * TINY.steps
    for name in ("tail_batching@1.5", "tail_batching@1.5x2"):
        assert sum(int(r.completed.sum()) for r in series.results[name]) == groups
