"""Per-trajectory timelines and heddle formula 1's decomposition (``workers.sim.llm.timeline``)."""

from __future__ import annotations

import pytest

from workers.algorithms.heddle.prediction import (
    ProgressivePredictor,
    PromptHistoryPredictor,
    StepRecord,
    TrajectoryRecord,
)
from workers.algorithms.heddle.priority import PriorityPolicy
from workers.sim.llm.baselines import OraclePredictor, heddle, verl_star
from workers.sim.llm.experiments import time_breakdown
from workers.sim.llm.rollout import (
    PlacementPolicy,
    Scenario,
    SystemConfig,
    WorkloadHistory,
    run_rollout,
)
from workers.sim.llm.systems import EngineName
from workers.sim.llm.timeline import decompose
from workers.sim.llm.trajectories import generate_trajectories


@pytest.mark.parametrize("engine", ["context", "legacy"])
@pytest.mark.parametrize("system", [heddle(), verl_star(2)], ids=lambda s: s.name)
def test_the_parts_add_up_to_every_trajectorys_finish_time(
    engine: EngineName, system: SystemConfig
) -> None:
    train = generate_trajectories("coding", prompts=3, seed=5, epoch=0)
    records = generate_trajectories("coding", prompts=3, seed=5, epoch=1)
    predictor = ProgressivePredictor(PromptHistoryPredictor().fit(train), max_iter=20).fit(train)
    scenario = Scenario(
        gpu_budget=4, max_batch_per_gpu=6, max_trajectories_per_gpu=32, engine=engine
    )
    result = run_rollout(records, system, scenario, predictor, WorkloadHistory.of(train))
    for record in records:
        outcome = result.outcomes[record.trajectory_id]
        parts = decompose(outcome.timeline)
        assert len(outcome.timeline) == len(record.steps)
        total = sum(
            parts[key]
            for key in ("queueing_s", "alone_s", "interference_s", "tool_s", "migration_wait_s")
        )
        assert total == pytest.approx(outcome.finished_at, rel=1e-9, abs=1e-9)
        assert parts["output_tokens"] == record.total_tokens
        assert parts["queueing_s"] == pytest.approx(outcome.queueing_seconds)
    breakdown = time_breakdown(result)
    assert breakdown["critical_trajectory"]["finish_s"] == pytest.approx(result.makespan)
    assert max(breakdown["worker_last_finish_s"]) == pytest.approx(result.makespan)
    assert breakdown["all_trajectories"]["alpha"] >= 1.0 - 1e-9


@pytest.mark.parametrize("engine", ["context", "legacy"])
def test_a_trajectory_alone_on_its_worker_has_no_interference_and_no_queueing(
    engine: EngineName,
) -> None:
    record = TrajectoryRecord(
        "t", "p", "g", 300, (StepRecord(400, 0.2, 100), StepRecord(250, 0.1, 50))
    )
    scenario = Scenario(gpu_budget=2, max_batch_per_gpu=4, engine=engine)
    system = SystemConfig(
        "alone", PriorityPolicy.ROUND_ROBIN, PlacementPolicy.STATIC_AFFINITY, mp_degree=2
    )
    result = run_rollout([record], system, scenario, OraclePredictor([record]))
    parts = decompose(result.outcomes["t"].timeline)
    assert parts["queueing_s"] == 0.0
    assert parts["interference_s"] == pytest.approx(0.0, abs=1e-6 * result.makespan)
    assert parts["alpha"] == pytest.approx(1.0, rel=1e-6)
    assert parts["mp_degrees"] == [2]
