from __future__ import annotations

import itertools

import numpy as np
import pytest

from workers.algorithms.heddle.latency_model import MP_DEGREES, MPLatencyModel
from workers.algorithms.heddle.parallelism import (
    ContextGrowth,
    homogeneous_plan,
    plan_parallelism,
)

MODEL = MPLatencyModel()


@pytest.mark.parametrize("budget", [1, 3, 8, 16, 24])
def test_sa_respects_the_gpu_budget_and_allowed_degrees(budget: int) -> None:
    lengths = np.random.default_rng(budget).lognormal(7, 1, 120)
    plan = plan_parallelism(lengths, budget, MODEL, batch_limit_per_gpu=16, seed=budget)
    assert sum(plan.degrees) == budget
    assert all(d in MP_DEGREES for d in plan.degrees)
    assert list(plan.degrees) == sorted(plan.degrees, reverse=True)
    assert sum(plan.placement.group_sizes) == 120
    assert plan.evaluations >= 1


def test_sa_is_no_worse_than_its_sorted_random_start_and_beats_fix1_on_a_long_tail() -> None:
    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.lognormal(7, 0.5, 200), [40_000.0, 30_000.0]])
    plan = plan_parallelism(lengths, 16, MODEL, batch_limit_per_gpu=32, seed=1)
    fix1 = homogeneous_plan(lengths, 16, 1, MODEL, batch_limit_per_gpu=32)
    assert plan.makespan < fix1.makespan
    assert plan.degrees[0] > 1  # the long tail gets a model-parallel worker
    # deterministic for a seed
    again = plan_parallelism(lengths, 16, MODEL, batch_limit_per_gpu=32, seed=1)
    assert again.degrees == plan.degrees


def test_budget_checks() -> None:
    with pytest.raises(ValueError):
        plan_parallelism([1.0], 0, MODEL)
    with pytest.raises(ValueError):
        plan_parallelism([1.0] * 10, 2, MODEL, group_limit_per_gpu=4)
    with pytest.raises(ValueError):
        homogeneous_plan([1.0], 4, 8, MODEL)


def test_mp_latency_model_is_sublinear() -> None:
    assert MODEL.speedup(1) == 1.0
    speedups = [MODEL.speedup(m) for m in MP_DEGREES]
    assert all(b > a for a, b in itertools.pairwise(speedups))
    assert all(MODEL.speedup(m) < m for m in MP_DEGREES[1:])
    assert MODEL.tau(8) < MODEL.tau(1)
    alpha = MODEL.alpha_curve(300, 2)
    assert alpha[0] == 0 and alpha[1] == pytest.approx(1.0)
    assert np.all(np.diff(alpha[1:]) >= 0)
    assert alpha[200] == pytest.approx(MODEL.alpha_mp1(200))
    capped = MODEL.alpha_curve(300, 1, batch_limit=50, group_limit=200)
    assert capped[100] == pytest.approx(MODEL.alpha_mp1(50) * 2)
    assert np.isinf(capped[201])


def test_per_degree_batch_caps_reach_the_annealers_placement() -> None:
    """A cap given per degree replaces ``m ×`` the per-GPU one in the plan's DP: the same plan
    scored with a tighter cap on its only worker queues more, so its makespan grows."""
    lengths = np.random.default_rng(3).lognormal(7, 0.6, 64)
    loose = plan_parallelism(lengths, 8, MODEL, batch_limit_per_gpu=16, degrees=(8,))
    tight = plan_parallelism(
        lengths, 8, MODEL, batch_limit_per_gpu=16, degrees=(8,), batch_limits={8: 4}
    )
    assert loose.degrees == tight.degrees == (8,)
    assert tight.makespan > loose.makespan


def test_a_context_charge_reaches_the_annealers_placement() -> None:
    """With a KV profile, the context charge adds every member's KV reads to the plan's score."""
    lengths = np.random.default_rng(4).lognormal(7, 0.6, 64)
    charged_model = MPLatencyModel(kv_profile=tuple((m, 1e-6, 1e9) for m in MP_DEGREES))
    plain = plan_parallelism(lengths, 8, charged_model, batch_limit_per_gpu=16, degrees=(8,))
    charged = plan_parallelism(
        lengths,
        8,
        charged_model,
        batch_limit_per_gpu=16,
        degrees=(8,),
        context=ContextGrowth(base_tokens=500.0, growth=1.2),
    )
    assert charged.makespan > plain.makespan
